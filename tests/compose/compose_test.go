package compose

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// ---- the files are valid Compose ---------------------------------------------------------------

func TestComposeFileParsesWithTheComposeSpecSchema(t *testing.T) {
	p, err := loadProject(t, true, composeFile)
	if err != nil {
		t.Fatalf("%s does not load with schema validation and consistency checks: %v", composeFile, err)
	}
	for _, want := range []string{"cluecdc", "cluecdc-worker", "kafka", "connect", "postgres"} {
		service(t, p, want)
	}
	if _, ok := p.Services["minio"]; ok {
		t.Errorf("service \"minio\" is in %s; MinIO (AGPL-3.0) may only appear in %s", composeFile, composeTestFile)
	}
}

func TestComposeFileWithTheTestOverrideParsesWithTheComposeSpecSchema(t *testing.T) {
	p, err := loadProject(t, true, composeFile, composeTestFile)
	if err != nil {
		t.Fatalf("%s + %s do not load with schema validation and consistency checks: %v", composeFile, composeTestFile, err)
	}
	for _, want := range []string{"cluecdc", "cluecdc-worker", "kafka", "connect", "postgres", "minio", "minio-bootstrap", "mariadb", "mysql"} {
		service(t, p, want)
	}
}

// Guards the guard: if schema validation were off, typos would load silently.
func TestTheLoaderRejectsAnUnknownServiceKey(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "compose.yaml")
	if err := os.WriteFile(bad, []byte("services:\n  app:\n    image: busybox\n    helthcheck:\n      test: [\"CMD\", \"true\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(repoRoot(t), bad)
	if err != nil {
		t.Fatal(err)
	}
	_, err = loadProject(t, true, rel)
	if err == nil {
		t.Fatal("a service with the unknown key \"helthcheck\" loaded without error: schema validation is off")
	}
	if !strings.Contains(err.Error(), "helthcheck") {
		t.Fatalf("the error does not name the unknown key: %v", err)
	}
}

// ---- cross references --------------------------------------------------------------------------

func TestEveryDependsOnTargetIsAServiceOfTheProject(t *testing.T) {
	forEachProject(t, func(t *testing.T, p *types.Project) {
		for _, s := range sortedServices(p) {
			for _, dep := range keys(s.DependsOn) {
				if _, ok := p.Services[dep]; !ok {
					t.Errorf("service %q: depends_on.%s names no service", s.Name, dep)
				}
				switch c := s.DependsOn[dep].Condition; c {
				case types.ServiceConditionStarted, types.ServiceConditionHealthy, types.ServiceConditionCompletedSuccessfully:
				default:
					t.Errorf("service %q: depends_on.%s.condition %q is not a known condition", s.Name, dep, c)
				}
				if s.DependsOn[dep].Condition == types.ServiceConditionHealthy {
					if d, ok := p.Services[dep]; ok && (d.HealthCheck == nil || d.HealthCheck.Disable || len(d.HealthCheck.Test) == 0) {
						t.Errorf("service %q: depends_on.%s waits for service_healthy but %q has no healthcheck", s.Name, dep, dep)
					}
				}
			}
		}
	})
}

func TestEveryBuiltServiceHasAnExistingContextAndDockerfile(t *testing.T) {
	forEachProject(t, func(t *testing.T, p *types.Project) {
		for _, s := range sortedServices(p) {
			if s.Build == nil {
				continue
			}
			ctx := s.Build.Context
			if fi, err := os.Stat(ctx); err != nil || !fi.IsDir() {
				t.Errorf("service %q: build.context %s is not an existing directory", s.Name, ctx)
				continue
			}
			df := s.Build.Dockerfile
			if df == "" {
				df = "Dockerfile"
			}
			if !filepath.IsAbs(df) {
				df = filepath.Join(ctx, df)
			}
			if fi, err := os.Stat(df); err != nil || fi.IsDir() {
				t.Errorf("service %q: build.dockerfile %s does not exist", s.Name, df)
			}
			if s.Image == "" {
				t.Errorf("service %q: builds an image but sets no image: tag", s.Name)
			}
			if fi, err := os.Stat(df); err == nil && !fi.IsDir() {
				declared := map[string]bool{}
				for _, in := range instructionsNamed(parseDockerfile(t, df), "ARG") {
					name, _, _ := strings.Cut(in.args, "=")
					declared[strings.TrimSpace(name)] = true
				}
				for _, arg := range keys(s.Build.Args) {
					if !declared[arg] {
						t.Errorf("service %q: build.args.%s is not declared as ARG in %s, so the build ignores it", s.Name, arg, df)
					}
				}
			}
		}
	})
}

func TestServicesSharingAnImageAlsoShareItsBuild(t *testing.T) {
	// `up` would otherwise try to pull a locally built tag for the service without build:.
	forEachProject(t, func(t *testing.T, p *types.Project) {
		byImage := map[string][]types.ServiceConfig{}
		for _, s := range sortedServices(p) {
			if s.Image != "" {
				byImage[s.Image] = append(byImage[s.Image], s)
			}
		}
		for img, ss := range byImage {
			built := false
			for _, s := range ss {
				built = built || s.Build != nil
			}
			if !built {
				continue
			}
			for _, s := range ss {
				if s.Build == nil {
					t.Errorf("service %q: image %s is built by another service; give it the same build: section", s.Name, img)
					continue
				}
				if s.Build.Context != ss[0].Build.Context || s.Build.Dockerfile != ss[0].Build.Dockerfile {
					t.Errorf("service %q: image %s is built from %s/%s but service %q builds it from %s/%s",
						s.Name, img, s.Build.Context, s.Build.Dockerfile, ss[0].Name, ss[0].Build.Context, ss[0].Build.Dockerfile)
				}
			}
		}
	})
}

func TestEveryNamedVolumeUsedByAServiceIsDeclared(t *testing.T) {
	forEachProject(t, func(t *testing.T, p *types.Project) {
		used := map[string]bool{}
		// A volume only a profile's services use is still used (when that profile runs).
		for _, s := range p.DisabledServices {
			for _, v := range s.Volumes {
				if v.Type == types.VolumeTypeVolume {
					used[v.Source] = true
				}
			}
		}
		for _, s := range sortedServices(p) {
			for i, v := range s.Volumes {
				switch v.Type {
				case types.VolumeTypeVolume:
					if v.Source == "" {
						t.Errorf("service %q: volumes[%d] (%s) is anonymous; use a named volume", s.Name, i, v.Target)
						continue
					}
					used[v.Source] = true
					if _, ok := p.Volumes[v.Source]; !ok {
						t.Errorf("service %q: volumes[%d] uses volume %q, which is not declared under top-level volumes:", s.Name, i, v.Source)
					}
				case types.VolumeTypeBind:
					if _, err := os.Stat(v.Source); err != nil {
						t.Errorf("service %q: volumes[%d] binds %s, which does not exist in the repository", s.Name, i, v.Source)
					}
					if !v.ReadOnly {
						t.Errorf("service %q: volumes[%d] binds %s read-write; repository files are mounted :ro", s.Name, i, v.Source)
					}
				}
			}
		}
		for _, name := range keys(p.Volumes) {
			if !used[name] {
				t.Errorf("volumes.%s is declared but no service uses it", name)
			}
		}
	})
}

func TestAllServicesShareOneNetwork(t *testing.T) {
	forEachProject(t, func(t *testing.T, p *types.Project) {
		if len(p.Networks) != 1 {
			t.Fatalf("expected exactly one network, found %v", keys(p.Networks))
		}
		net := keys(p.Networks)[0]
		for _, s := range sortedServices(p) {
			if _, ok := s.Networks[net]; !ok || len(s.Networks) != 1 {
				t.Errorf("service %q: networks = %v, want only %q", s.Name, keys(s.Networks), net)
			}
		}
	})
}

func TestNoTwoServicesPublishTheSameHostPort(t *testing.T) {
	forEachProject(t, func(t *testing.T, p *types.Project) {
		owner := map[string]string{}
		for _, s := range sortedServices(p) {
			for i, port := range s.Ports {
				if port.Published == "" {
					t.Errorf("service %q: ports[%d] (container %d) has no fixed host port", s.Name, i, port.Target)
					continue
				}
				if port.HostIP != "127.0.0.1" {
					t.Errorf("service %q: ports[%d] publishes %s on %q; publish on 127.0.0.1 only", s.Name, i, port.Published, port.HostIP)
				}
				key := port.Protocol + "/" + port.Published
				if prev, dup := owner[key]; dup {
					t.Errorf("service %q: ports[%d] publishes host port %s, already published by service %q", s.Name, i, key, prev)
				}
				owner[key] = s.Name
			}
		}
	})
}

func TestEveryLongRunningServiceHasAHealthcheck(t *testing.T) {
	forEachProject(t, func(t *testing.T, p *types.Project) {
		for _, s := range sortedServices(p) {
			if isOneShot(s) {
				continue
			}
			hc := s.HealthCheck
			if hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] == "NONE" {
				t.Errorf("service %q: has no healthcheck.test", s.Name)
				continue
			}
			if hc.Interval == nil || hc.Timeout == nil || hc.Retries == nil {
				t.Errorf("service %q: healthcheck sets no interval/timeout/retries", s.Name)
			}
		}
	})
}

// `up --wait` fails on a service that exits unless some service awaits it with
// service_completed_successfully (docker/compose#10596).
func TestEveryOneShotServiceIsAwaitedWithServiceCompletedSuccessfully(t *testing.T) {
	forEachProject(t, func(t *testing.T, p *types.Project) {
		for _, s := range sortedServices(p) {
			if !isOneShot(s) {
				continue
			}
			awaited := false
			for _, other := range sortedServices(p) {
				if d, ok := other.DependsOn[s.Name]; ok && d.Condition == types.ServiceConditionCompletedSuccessfully && !isOneShot(other) {
					awaited = true
				}
			}
			if !awaited {
				t.Errorf("service %q: is one-shot (restart: \"no\") but no long-running service depends on it with service_completed_successfully", s.Name)
			}
		}
	})
}

func isOneShot(s types.ServiceConfig) bool { return s.Restart == "no" }

// ---- versions agree with connect-image/versions.lock -------------------------------------------

func TestImageTagsAndBuildArgsMatchVersionsLock(t *testing.T) {
	lock := readLock(t)
	kafka := lockValue(t, lock, "KAFKA_VERSION")
	debezium := lockValue(t, lock, "DEBEZIUM_VERSION")
	aiven := lockValue(t, lock, "AIVEN_S3_VERSION")

	forEachProject(t, func(t *testing.T, p *types.Project) {
		// Any build arg named like a lock key must carry the locked value.
		for _, s := range sortedServices(p) {
			if s.Build == nil {
				continue
			}
			for _, arg := range keys(s.Build.Args) {
				want, pinned := lock[arg]
				if !pinned {
					continue
				}
				if got, _ := buildArg(s, arg); got != want {
					t.Errorf("service %q: build.args.%s = %q, %s has %s=%q", s.Name, arg, got, versionsLock, arg, want)
				}
			}
		}

		if got, want := service(t, p, "kafka").Image, "apache/kafka:"+kafka; got != want {
			t.Errorf("service \"kafka\": image = %q, want %q (KAFKA_VERSION in %s)", got, want, versionsLock)
		}

		connect := service(t, p, "connect")
		if len(connect.Build.Args) == 0 {
			// No version build args: then the image must read the lock file itself.
			copiesLock := false
			for _, in := range instructionsNamed(parseDockerfile(t, filepath.Join(connect.Build.Context, connect.Build.Dockerfile)), "COPY") {
				copiesLock = copiesLock || strings.Contains(in.args, "versions.lock")
			}
			if !copiesLock {
				t.Errorf("service \"connect\": passes no version build args and its Dockerfile does not COPY versions.lock")
			}
		}
		wantTag := "cluecdc/connect:kafka-" + kafka + "-debezium-" + debezium + "-aiven-s3-" + aiven
		if connect.Image != wantTag {
			t.Errorf("service \"connect\": image = %q, want %q (named after the versions in %s)", connect.Image, wantTag, versionsLock)
		}
	})

	p := mustLoad(t, composeFile, composeTestFile)
	minio := service(t, p, "minio")
	for _, key := range []string{"MINIO_MODULE_VERSION", "MINIO_MODULE_SUM", "MINIO_GO_VERSION"} {
		want := lockValue(t, lock, key)
		if got, ok := buildArg(minio, key); !ok || got != want {
			t.Errorf("service \"minio\": build.args.%s = %q, %s has %s=%q", key, got, versionsLock, key, want)
		}
	}
	if want := "cluecdc-fixture/minio:" + lockValue(t, lock, "MINIO_MODULE_VERSION"); minio.Image != want {
		t.Errorf("service \"minio\": image = %q, want %q", minio.Image, want)
	}
}

var pseudoVersion = regexp.MustCompile(`^v0\.0\.0-(\d{14})-([0-9a-f]{12})$`)

func TestVersionsLockPinsMinioByModuleVersionAndChecksum(t *testing.T) {
	lock := readLock(t)
	release := lockValue(t, lock, "MINIO_RELEASE")
	if !regexp.MustCompile(`^RELEASE\.\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}Z$`).MatchString(release) {
		t.Errorf("%s: MINIO_RELEASE=%q is not a MinIO RELEASE.YYYY-MM-DDTHH-MM-SSZ tag", versionsLock, release)
	}
	mod := lockValue(t, lock, "MINIO_MODULE_VERSION")
	m := pseudoVersion.FindStringSubmatch(mod)
	if m == nil {
		t.Fatalf("%s: MINIO_MODULE_VERSION=%q is not a Go pseudo-version v0.0.0-<time>-<commit>", versionsLock, mod)
	}
	if commit, ok := lock["MINIO_COMMIT"]; ok && !strings.HasPrefix(commit, m[2]) {
		t.Errorf("%s: MINIO_COMMIT=%q does not start with the pseudo-version's commit %s", versionsLock, commit, m[2])
	}
	sum := lockValue(t, lock, "MINIO_MODULE_SUM")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sum, "h1:"))
	if !strings.HasPrefix(sum, "h1:") || err != nil || len(raw) != 32 {
		t.Errorf("%s: MINIO_MODULE_SUM=%q is not an h1: SHA-256 module hash", versionsLock, sum)
	}
}

func TestMinioDockerfilePinsTheLockedModuleVersion(t *testing.T) {
	lock := readLock(t)
	p := mustLoad(t, composeFile, composeTestFile)
	minio := service(t, p, "minio")
	df := filepath.Join(minio.Build.Context, minio.Build.Dockerfile)
	if want := repoPath(t, minioDockerfile); df != want {
		t.Fatalf("service \"minio\": builds %s, want %s", df, want)
	}
	ins := parseDockerfile(t, df)
	defaults := argDefaults(ins)
	for _, key := range []string{"MINIO_MODULE_VERSION", "MINIO_MODULE_SUM", "MINIO_GO_VERSION"} {
		want := lockValue(t, lock, key)
		if len(defaults[key]) == 0 {
			t.Errorf("%s: no ARG %s=<default>", minioDockerfile, key)
		}
		for _, got := range defaults[key] {
			if got != want {
				t.Errorf("%s: ARG %s=%s, %s has %q", minioDockerfile, key, got, versionsLock, want)
			}
		}
	}

	var from []string
	for _, in := range instructionsNamed(ins, "FROM") {
		from = append(from, in.args)
	}
	if len(from) == 0 || !strings.HasPrefix(from[0], "golang:${MINIO_GO_VERSION}") {
		t.Errorf("%s: the build stage is FROM %q, want golang:${MINIO_GO_VERSION}", minioDockerfile, strings.Join(from, " | "))
	}

	var run string
	for _, in := range instructionsNamed(ins, "RUN") {
		if strings.Contains(in.args, "go install") {
			run = in.args
		}
	}
	checks := []struct{ what, needle string }{
		{"downloads exactly the pinned module with go mod download -json", `go mod download -json "github.com/minio/minio@${MINIO_MODULE_VERSION}"`},
		{"compares the downloaded module's Sum with MINIO_MODULE_SUM", `\"Sum\": \"${MINIO_MODULE_SUM}\"`},
		{"installs exactly the pinned module", `github.com/minio/minio@${MINIO_MODULE_VERSION}`},
	}
	for _, c := range checks {
		if !strings.Contains(run, c.needle) {
			t.Errorf("%s: the go install step no longer %s (expected %s)", minioDockerfile, c.what, c.needle)
		}
	}
	if strings.Contains(run, "@latest") {
		t.Errorf("%s: installs @latest; only the pinned MINIO_MODULE_VERSION is allowed", minioDockerfile)
	}
	if i, j := strings.Index(run, "go mod download"), strings.Index(run, "go install"); i < 0 || j < i {
		t.Errorf("%s: the checksum check must run before go install", minioDockerfile)
	}
}

func TestMinioIsAnAGPLTestFixtureOnlyInTheTestOverride(t *testing.T) {
	base := mustLoad(t, composeFile)
	for _, s := range sortedServices(base) {
		if strings.Contains(strings.ToLower(s.Image), "minio") {
			t.Errorf("service %q in %s uses a MinIO image; MinIO belongs only in %s", s.Name, composeFile, composeTestFile)
		}
	}
	for _, f := range []string{composeTestFile, minioDockerfile} {
		data, err := os.ReadFile(repoPath(t, f))
		if err != nil {
			t.Fatal(err)
		}
		// Comment text only, with the comment markers and line breaks removed.
		var words []string
		for _, line := range strings.Split(strings.ToLower(string(data)), "\n") {
			words = append(words, strings.Fields(strings.TrimLeft(strings.TrimSpace(line), "#"))...)
		}
		text := strings.Join(words, " ")
		for _, phrase := range []string{"agpl-3.0", "optional test fixture", "not part of any cluecdc runtime image"} {
			if !strings.Contains(text, phrase) {
				t.Errorf("%s: the licence comment no longer says %q", f, phrase)
			}
		}
	}
	root := parseDockerfile(t, repoPath(t, "Dockerfile"))
	for _, in := range root {
		if strings.Contains(strings.ToLower(in.args), "minio") && in.cmd != "LABEL" {
			t.Errorf("Dockerfile:%d: the ClueCDC runtime image mentions MinIO: %s %s", in.line, in.cmd, in.args)
		}
	}
}

// One MinIO pin serves both: the native stack builds the same module the compose image builds,
// and checks the same hash.
func TestTheNativeStackBuildsTheLockedMinioModule(t *testing.T) {
	lock := readLock(t)
	if _, ok := lock["S3S_FS_VERSION"]; ok {
		t.Errorf("%s still pins S3S_FS_VERSION: the native stack's S3 server is MinIO", versionsLock)
	}
	data, err := os.ReadFile(repoPath(t, "scripts/stack"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(data)
	for _, needle := range []string{"lock MINIO_MODULE_VERSION", "lock MINIO_MODULE_SUM", "lock MINIO_GO_VERSION",
		`go mod download -json "github.com/minio/minio@$ver"`, `go install -trimpath -ldflags "-s -w" "github.com/minio/minio@$ver"`} {
		if !strings.Contains(script, needle) {
			t.Errorf("scripts/stack: no %q (it builds MinIO from the pinned module and checks its hash)", needle)
		}
	}
	if strings.Contains(strings.ToLower(script), "s3s-fs") {
		t.Errorf("scripts/stack still mentions s3s-fs")
	}
}

// ---- fixture wiring -----------------------------------------------------------------------------

func TestMinioBootstrapUsesTheFixtureBucketCredentialsAndEndpoint(t *testing.T) {
	p := mustLoad(t, composeFile, composeTestFile)
	minio := service(t, p, "minio")
	boot := service(t, p, "minio-bootstrap")

	want := map[string]string{
		"S3_ENDPOINT":   "http://minio:9000",
		"S3_REGION":     "us-east-1",
		"S3_BUCKET":     "cluecdc-test",
		"S3_ACCESS_KEY": "cluecdc-fixture",
		"S3_SECRET_KEY": "cluecdc-fixture-secret-0123456789",
	}
	for _, k := range keys(want) {
		if got, _ := env(boot, k); got != want[k] {
			t.Errorf("service \"minio-bootstrap\": environment.%s = %q, want %q", k, got, want[k])
		}
	}
	if got, _ := env(minio, "MINIO_ROOT_USER"); got != want["S3_ACCESS_KEY"] {
		t.Errorf("service \"minio\": environment.MINIO_ROOT_USER = %q, want the bootstrap access key %q", got, want["S3_ACCESS_KEY"])
	}
	if got, _ := env(minio, "MINIO_ROOT_PASSWORD"); got != want["S3_SECRET_KEY"] {
		t.Errorf("service \"minio\": environment.MINIO_ROOT_PASSWORD differs from minio-bootstrap's S3_SECRET_KEY")
	}
	if got, _ := env(minio, "MINIO_SITE_REGION"); got != want["S3_REGION"] {
		t.Errorf("service \"minio\": environment.MINIO_SITE_REGION = %q, want %q", got, want["S3_REGION"])
	}
	if minio.Hostname != "minio" {
		t.Errorf("service \"minio\": hostname = %q, want \"minio\" (the endpoint is http://minio:9000)", minio.Hostname)
	}
	if !strings.Contains(strings.Join(minio.Command, " "), "--address :9000") {
		t.Errorf("service \"minio\": command %q does not listen on :9000", strings.Join(minio.Command, " "))
	}
	if d, ok := boot.DependsOn["minio"]; !ok || d.Condition != types.ServiceConditionHealthy {
		t.Errorf("service \"minio-bootstrap\": depends_on.minio must wait for service_healthy")
	}
	script := false
	for _, v := range boot.Volumes {
		if v.Type == types.VolumeTypeBind && v.Source == repoPath(t, "compose/minio/bootstrap.py") {
			script = strings.Contains(strings.Join(boot.Command, " "), v.Target)
		}
	}
	if !script {
		t.Errorf("service \"minio-bootstrap\": does not run the mounted compose/minio/bootstrap.py")
	}
}

func TestPostgresRunsWithLogicalDecodingAndAFixtureReplicationUser(t *testing.T) {
	p := mustLoad(t, composeFile)
	pg := service(t, p, "postgres")
	if !regexp.MustCompile(`^postgres:1[56]([.-]|$)`).MatchString(pg.Image) {
		t.Errorf("service \"postgres\": image = %q, want postgres 15 or 16", pg.Image)
	}
	if !strings.Contains(strings.Join(pg.Command, " "), "wal_level=logical") {
		t.Errorf("service \"postgres\": command %q does not set wal_level=logical", strings.Join(pg.Command, " "))
	}
	init := repoPath(t, "compose/postgres/10-cluecdc-fixture.sql")
	mounted := false
	for _, v := range pg.Volumes {
		if v.Source == init && strings.HasPrefix(v.Target, "/docker-entrypoint-initdb.d/") {
			mounted = true
		}
	}
	if !mounted {
		t.Fatalf("service \"postgres\": %s is not mounted into /docker-entrypoint-initdb.d/", init)
	}
	sql, err := os.ReadFile(init)
	if err != nil {
		t.Fatal(err)
	}
	for _, needle := range []string{"LOGIN REPLICATION", "CREATE DATABASE cdc_source", "CREATE DATABASE cdc_dest"} {
		if !strings.Contains(string(sql), needle) {
			t.Errorf("%s: no %q", init, needle)
		}
	}
	if hc := strings.Join(pg.HealthCheck.Test, " "); !strings.Contains(hc, "-h 127.0.0.1") {
		t.Errorf("service \"postgres\": healthcheck %q should check over TCP (only listening after init)", hc)
	}
}

// The example shop: the native stack's `shop` component runs compose/postgres/20-shop.sql and
// scripts/stack.d/shop-trickle.sh; compose runs the same two files, not copies.
func TestTheShopSchemaIsAPostgresInitFileAndItsTrickleRunsTheStacksScript(t *testing.T) {
	p := mustLoad(t, composeFile)
	pg := service(t, p, "postgres")
	schema := repoPath(t, "compose/postgres/20-shop.sql")
	mounted := false
	for _, v := range pg.Volumes {
		if v.Source == schema && strings.HasPrefix(v.Target, "/docker-entrypoint-initdb.d/") {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("service \"postgres\": %s is not mounted into /docker-entrypoint-initdb.d/", schema)
	}
	sql, err := os.ReadFile(schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, needle := range []string{"CREATE DATABASE shop OWNER cdc_user", "CREATE OR REPLACE FUNCTION shop_tick()", "GRANT EXECUTE ON FUNCTION shop_tick() TO shop_app"} {
		if !strings.Contains(string(sql), needle) {
			t.Errorf("%s: no %q", schema, needle)
		}
	}
	trickle := service(t, p, "shop-trickle")
	if trickle.Image != pg.Image {
		t.Errorf("service \"shop-trickle\": image = %q, want the postgres service's %q (its psql)", trickle.Image, pg.Image)
	}
	script := repoPath(t, "scripts/stack.d/shop-trickle.sh")
	target := ""
	for _, v := range trickle.Volumes {
		if v.Source == script {
			target = v.Target
		}
	}
	if target == "" {
		t.Fatalf("service \"shop-trickle\": does not mount %s", script)
	}
	if len(trickle.Command) < 2 || trickle.Command[1] != target {
		t.Errorf("service \"shop-trickle\": command %q does not run the mounted script %s", trickle.Command, target)
	}
	for key, want := range map[string]string{"PGHOST": "postgres", "PGUSER": "shop_app", "PGDATABASE": "shop"} {
		if got, _ := env(trickle, key); got != want {
			t.Errorf("service \"shop-trickle\": %s = %q, want %q", key, got, want)
		}
	}
	if d, ok := trickle.DependsOn["postgres"]; !ok || d.Condition != types.ServiceConditionHealthy {
		t.Errorf("service \"shop-trickle\": should depend on postgres being healthy (the init files ran)")
	}
}

func TestMariadbWritesAFullRowBinlog(t *testing.T) {
	p := mustLoad(t, composeFile, composeTestFile)
	m := service(t, p, "mariadb")
	if !strings.HasPrefix(m.Image, "mariadb:10.11") {
		t.Errorf("service \"mariadb\": image = %q, want mariadb:10.11", m.Image)
	}
	cmd := strings.Join(m.Command, " ")
	for _, flag := range []string{"--log-bin", "--binlog-format=ROW", "--binlog-row-image=FULL", "--server-id="} {
		if !strings.Contains(cmd, flag) {
			t.Errorf("service \"mariadb\": command %q lacks %s", cmd, flag)
		}
	}
}

// The grants Debezium documents for its MySQL connector's user (no more): the native stack's
// capture user and the compose fixture's get exactly these.
const debeziumMysqlGrants = "GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO "

// mysqlFixtureSQL returns the SQL the mysql service's entrypoint runs from
// /docker-entrypoint-initdb.d/ (an inline config), and the config's name.
func mysqlFixtureSQL(t *testing.T, p *types.Project) (string, string) {
	t.Helper()
	m := service(t, p, "mysql")
	for _, c := range m.Configs {
		if !strings.HasPrefix(c.Target, "/docker-entrypoint-initdb.d/") || !strings.HasSuffix(c.Target, ".sql") {
			continue
		}
		cfg, ok := p.Configs[c.Source]
		if !ok {
			t.Fatalf("service \"mysql\": configs names %q, which is not declared under top-level configs:", c.Source)
		}
		if cfg.Content == "" {
			t.Fatalf("configs.%s: no inline content (the fixture SQL lives in %s)", c.Source, composeTestFile)
		}
		return cfg.Content, c.Source
	}
	t.Fatalf("service \"mysql\": no config mounted as /docker-entrypoint-initdb.d/*.sql")
	return "", ""
}

func TestMysqlRunsThePinnedSeriesWithAFullRowBinlogAndGtids(t *testing.T) {
	lock := readLock(t)
	deb := lockValue(t, lock, "MYSQL_DEBIAN_VERSION")
	v := regexp.MustCompile(`^(\d+)\.(\d+)\.\d+-[0-9A-Za-z.+~]+$`).FindStringSubmatch(deb)
	if v == nil {
		t.Fatalf("%s: MYSQL_DEBIAN_VERSION=%q is not a Debian package version <major>.<minor>.<patch>-<revision>", versionsLock, deb)
	}
	p := mustLoad(t, composeFile, composeTestFile)
	m := service(t, p, "mysql")
	if !regexp.MustCompile(`^mysql:` + v[1] + `\.` + v[2] + `(\.\d+)?$`).MatchString(m.Image) {
		t.Errorf("service \"mysql\": image = %q, want mysql:%s.%s (the series of MYSQL_DEBIAN_VERSION=%s in %s, which the native stack runs)",
			m.Image, v[1], v[2], deb, versionsLock)
	}
	cmd := strings.Join(m.Command, " ")
	for _, flag := range []string{"--server-id=", "--log-bin", "--binlog-format=ROW", "--binlog-row-image=FULL", "--gtid-mode=ON", "--enforce-gtid-consistency=ON"} {
		if !strings.Contains(cmd, flag) {
			t.Errorf("service \"mysql\": command %q lacks %s", cmd, flag)
		}
	}
	if hc := strings.Join(m.HealthCheck.Test, " "); !strings.Contains(hc, "-h 127.0.0.1") {
		t.Errorf("service \"mysql\": healthcheck %q should check over TCP (the init server listens on the socket only)", hc)
	}
	sql, name := mysqlFixtureSQL(t, p)
	if !strings.Contains(sql, debeziumMysqlGrants+"'cdc_user'@'%'") {
		t.Errorf("configs.%s: does not grant cdc_user exactly %q…", name, debeziumMysqlGrants)
	}
	if strings.Contains(strings.ToUpper(sql), "GRANT ALL PRIVILEGES ON *.*") {
		t.Errorf("configs.%s: grants ALL on *.*; the capture user gets only the Debezium grants", name)
	}
	native, err := os.ReadFile(repoPath(t, "scripts/stack"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(native), debeziumMysqlGrants+"'$MYSQL_USER'@'%'") {
		t.Errorf("scripts/stack: bootstrap_mysql no longer grants the capture user exactly %q…", debeziumMysqlGrants)
	}
}

// ---- ClueCDC services ----------------------------------------------------------------------------

func TestClueCDCHealthcheckHitsHealthz(t *testing.T) {
	forEachProject(t, func(t *testing.T, p *types.Project) {
		c := service(t, p, "cluecdc")
		listen, ok := env(c, "CLUECDC_LISTEN")
		if !ok || listen != "0.0.0.0:8080" {
			t.Errorf("service \"cluecdc\": environment.CLUECDC_LISTEN = %q, want 0.0.0.0:8080", listen)
		}
		hc := strings.Join(c.HealthCheck.Test, " ")
		if !strings.Contains(hc, "http://127.0.0.1:"+portOf(listen)+"/healthz") {
			t.Errorf("service \"cluecdc\": healthcheck.test %q does not GET /healthz on the CLUECDC_LISTEN port", hc)
		}
		published := false
		for _, port := range c.Ports {
			published = published || (port.Target == 8080 && port.Published == "8080" && port.HostIP == "127.0.0.1")
		}
		if !published {
			t.Errorf("service \"cluecdc\": port 8080 is not published on 127.0.0.1:8080")
		}
	})
}

func TestTheWorkerRunsTheSameImageOnTheSameDataVolume(t *testing.T) {
	p := mustLoad(t, composeFile)
	serve, worker := service(t, p, "cluecdc"), service(t, p, "cluecdc-worker")
	if serve.Image != worker.Image {
		t.Errorf("service \"cluecdc-worker\": image = %q, service \"cluecdc\" runs %q", worker.Image, serve.Image)
	}
	if got := strings.Join(worker.Command, " "); got != "worker" {
		t.Errorf("service \"cluecdc-worker\": command = %q, want worker", got)
	}
	if got := strings.Join(serve.Command, " "); got != "serve" {
		t.Errorf("service \"cluecdc\": command = %q, want serve", got)
	}
	dataVolume := func(s types.ServiceConfig) string {
		dir, _ := env(s, "CLUECDC_DATA_DIR")
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeVolume && (dir == v.Target || strings.HasPrefix(dir, v.Target+"/")) {
				return v.Source
			}
		}
		return ""
	}
	if dataVolume(serve) == "" || dataVolume(serve) != dataVolume(worker) {
		t.Errorf("services \"cluecdc\" and \"cluecdc-worker\": CLUECDC_DATA_DIR is on volumes %q and %q, want the same named volume",
			dataVolume(serve), dataVolume(worker))
	}
	for _, key := range []string{"CLUECDC_DATA_DIR", "CLUECDC_MASTER_KEY_FILE", "CLUECDC_MASTER_KEY"} {
		a, _ := env(serve, key)
		b, _ := env(worker, key)
		if a != b || (key == "CLUECDC_DATA_DIR" && a == "") {
			t.Errorf("service \"cluecdc-worker\": environment.%s = %q, service \"cluecdc\" has %q", key, b, a)
		}
	}
	// An explicitly named key file must already exist (cluecdc refuses to start otherwise); only
	// the default <data dir>/master.key is generated on first start.
	if f, ok := env(serve, "CLUECDC_MASTER_KEY_FILE"); ok {
		t.Errorf("service \"cluecdc\": environment.CLUECDC_MASTER_KEY_FILE = %q would have to exist before the first start; leave it unset so serve generates <data dir>/master.key", f)
	}
	if d, ok := worker.DependsOn["cluecdc"]; !ok || d.Condition != types.ServiceConditionHealthy {
		t.Errorf("service \"cluecdc-worker\": depends_on.cluecdc must wait for service_healthy (migrations and master key)")
	}
}

func TestTheClueCDCDockerfileBuildsANonRootImageWithAHealthzCheck(t *testing.T) {
	ins := parseDockerfile(t, repoPath(t, "Dockerfile"))
	var last = map[string]instruction{}
	froms := 0
	for _, in := range ins {
		last[in.cmd] = in
		if in.cmd == "FROM" {
			froms++
		}
	}
	if froms < 2 {
		t.Errorf("Dockerfile: %d FROM stages, want a multi-stage build", froms)
	}
	first := instructionsNamed(ins, "FROM")
	if len(first) > 0 && !strings.HasPrefix(first[0].args, "rust:") {
		t.Errorf("Dockerfile: the builder stage is FROM %s, want rust:...", first[0].args)
	}
	if f := last["FROM"].args; !strings.HasPrefix(f, "debian:") || !strings.Contains(f, "-slim") {
		t.Errorf("Dockerfile: the runtime stage is FROM %s, want debian:<release>-slim", f)
	}
	checks := []struct{ cmd, needle, why string }{
		{"HEALTHCHECK", "/healthz", "HEALTHCHECK must GET /healthz"},
		{"EXPOSE", "8080", "EXPOSE 8080"},
		{"VOLUME", "/data", "VOLUME /data"},
		{"ENTRYPOINT", "cluecdc", "ENTRYPOINT runs cluecdc"},
		{"CMD", "serve", "CMD defaults to serve"},
	}
	for _, c := range checks {
		in, ok := last[c.cmd]
		if !ok || !strings.Contains(in.args, c.needle) {
			t.Errorf("Dockerfile: %s (got %s %q)", c.why, c.cmd, in.args)
		}
	}
	if u := last["USER"].args; u == "" || strings.HasPrefix(u, "root") || strings.HasPrefix(u, "0") {
		t.Errorf("Dockerfile: the runtime stage runs as USER %q, want a non-root user", u)
	}
	cacheMount := false
	for _, in := range instructionsNamed(ins, "RUN") {
		if strings.Contains(in.args, "cargo build") && strings.Contains(in.args, "--mount=type=cache") && strings.Contains(in.args, "--locked") {
			cacheMount = true
		}
	}
	if !cacheMount {
		t.Errorf("Dockerfile: cargo build should run --locked with --mount=type=cache for the registry and target")
	}
}

// ---- Kafka and Connect -----------------------------------------------------------------------------

func TestKafkaIsASingleKRaftNodeAdvertisingItsServiceName(t *testing.T) {
	p := mustLoad(t, composeFile)
	k := service(t, p, "kafka")
	roles, _ := env(k, "KAFKA_PROCESS_ROLES")
	if roles != "broker,controller" {
		t.Errorf("service \"kafka\": environment.KAFKA_PROCESS_ROLES = %q, want broker,controller", roles)
	}
	if id, _ := env(k, "CLUSTER_ID"); id == "" {
		t.Errorf("service \"kafka\": environment.CLUSTER_ID is required to format KRaft storage")
	}
	adv, internal := kafkaInternalListener(t, k)
	if hostOf(adv) != "kafka" || k.Hostname != "kafka" {
		t.Errorf("service \"kafka\": the inter-broker listener advertises %s (hostname %q); want kafka:<port>", adv, k.Hostname)
	}
	_ = internal
}

// kafkaInternalListener returns the advertised address of the inter-broker listener and its name,
// after checking that the name is also bound in KAFKA_LISTENERS on the same port.
func kafkaInternalListener(t *testing.T, k types.ServiceConfig) (string, string) {
	t.Helper()
	name, ok := env(k, "KAFKA_INTER_BROKER_LISTENER_NAME")
	if !ok {
		t.Fatalf("service \"kafka\": environment.KAFKA_INTER_BROKER_LISTENER_NAME is not set")
	}
	listenersSpec, _ := env(k, "KAFKA_LISTENERS")
	advertisedSpec, _ := env(k, "KAFKA_ADVERTISED_LISTENERS")
	listeners, err := listenerMap(listenersSpec)
	if err != nil {
		t.Fatalf("service \"kafka\": environment.KAFKA_LISTENERS: %v", err)
	}
	advertised, err := listenerMap(advertisedSpec)
	if err != nil {
		t.Fatalf("service \"kafka\": environment.KAFKA_ADVERTISED_LISTENERS: %v", err)
	}
	bound, ok := listeners[strings.ToUpper(name)]
	if !ok {
		t.Fatalf("service \"kafka\": listener %s is not in KAFKA_LISTENERS %q", name, listenersSpec)
	}
	adv, ok := advertised[strings.ToUpper(name)]
	if !ok {
		t.Fatalf("service \"kafka\": listener %s is not in KAFKA_ADVERTISED_LISTENERS %q", name, advertisedSpec)
	}
	if portOf(bound) != portOf(adv) {
		t.Fatalf("service \"kafka\": listener %s binds port %s but advertises %s", name, portOf(bound), adv)
	}
	return adv, name
}

func TestConnectBootstrapServersMatchTheKafkaListener(t *testing.T) {
	forEachProject(t, func(t *testing.T, p *types.Project) {
		k := service(t, p, "kafka")
		adv, name := kafkaInternalListener(t, k)
		cfg, where := connectWorkerConfig(t, p)
		bootstrap := cfg["bootstrap.servers"]
		if bootstrap == "" {
			t.Fatalf("service \"connect\": bootstrap.servers is not set (%s)", where)
		}
		for _, server := range strings.Split(bootstrap, ",") {
			if strings.TrimSpace(server) != adv {
				t.Errorf("service \"connect\": bootstrap.servers %q (%s) is not kafka's %s listener %s", server, where, name, adv)
			}
		}
		if d, ok := service(t, p, "connect").DependsOn["kafka"]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("service \"connect\": depends_on.kafka must wait for service_healthy")
		}
	})
}

func TestConnectWorkerSettingsMatchTheNativeStack(t *testing.T) {
	p := mustLoad(t, composeFile)
	cfg, where := connectWorkerConfig(t, p)
	want := map[string]string{
		"key.converter":                           "org.apache.kafka.connect.json.JsonConverter",
		"value.converter":                         "org.apache.kafka.connect.json.JsonConverter",
		"key.converter.schemas.enable":            "true",
		"value.converter.schemas.enable":          "true",
		"connector.client.config.override.policy": "All",
		"offset.flush.interval.ms":                "5000",
		"config.storage.replication.factor":       "1",
		"offset.storage.replication.factor":       "1",
		"status.storage.replication.factor":       "1",
	}
	for _, k := range keys(want) {
		if got := cfg[k]; got != want[k] {
			t.Errorf("service \"connect\": %s = %q, want %q (%s)", k, got, want[k], where)
		}
	}
	c := service(t, p, "connect")
	if got := cfg["rest.advertised.host.name"]; got != "" && got != c.Hostname && got != c.Name {
		t.Errorf("service \"connect\": rest.advertised.host.name = %q, but the service is reachable as %q (%s)", got, c.Hostname, where)
	}
	if l := cfg["listeners"]; l != "" && portOf(l) != "8083" {
		t.Errorf("service \"connect\": listeners = %q, want port 8083 (%s)", l, where)
	}
	for _, k := range []string{"group.id", "config.storage.topic", "offset.storage.topic", "status.storage.topic", "plugin.path"} {
		if cfg[k] == "" {
			t.Errorf("service \"connect\": %s is not set (%s)", k, where)
		}
	}
	rest := false
	for _, port := range c.Ports {
		rest = rest || (port.Target == 8083 && port.Published == "8083")
	}
	if !rest {
		t.Errorf("service \"connect\": the REST port 8083 is not published on 127.0.0.1:8083")
	}
	if hc := strings.Join(c.HealthCheck.Test, " "); !strings.Contains(hc, ":8083/") {
		t.Errorf("service \"connect\": healthcheck %q does not call the REST API on 8083", hc)
	}
}

func TestTheDockerignoreKeepsWhatCargoNeedsAndDropsLocalState(t *testing.T) {
	f, err := os.Open(repoPath(t, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	excluded := func(path string) bool {
		ok, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatalf(".dockerignore: matching %s: %v", path, err)
		}
		return ok
	}
	// The build needs the manifest, the lock file and everything embedded at compile time;
	// tests/it is a declared [[test]] target, so cargo wants it to exist even for --bin.
	for _, p := range []string{"Cargo.toml", "Cargo.lock", "src/main.rs", "src/lib.rs", "templates/base.html",
		"static/app.css", "migrations/0001_init.sql", "tests/it/main.rs", ".sqlx/query-0.json", "build.rs",
		"connect-image/versions.lock", "connect-image/config-provider/pom.xml",
		"connect-image/config-provider/src/main/java/io/cluecdc/connect/ClueCdcConfigProvider.java"} {
		p = filepath.ToSlash(filepath.Clean(p))
		if excluded(p) {
			t.Errorf(".dockerignore excludes %s, which the cluecdc build needs", p)
		}
	}
	for _, p := range []string{"target/release/cluecdc", ".git/HEAD", "cluecdc-data/cluecdc.db", "artifacts/report.json",
		".stack/kafka/meta.properties", "connect-image/Dockerfile", "connect-image/maven/assemble.sh",
		"connect-image/config-provider/target/cluecdc-config-provider-0.1.0.jar", "tests/compose/go.mod", "tests/browser/package.json"} {
		if !excluded(p) {
			t.Errorf(".dockerignore lets %s into the cluecdc build context", p)
		}
	}
}

// The compose fixtures use the same names and credentials as the native stack, so tests and demo
// scripts can switch between the two by endpoint only.
func TestFixtureCredentialsMatchTheNativeStack(t *testing.T) {
	data, err := os.ReadFile(repoPath(t, "scripts/stack"))
	if err != nil {
		t.Skipf("scripts/stack not readable: %v", err)
	}
	native := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := lockLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil && !strings.ContainsAny(m[2], "$`( ") {
			if _, seen := native[m[1]]; !seen {
				native[m[1]] = strings.Trim(m[2], `"'`)
			}
		}
	}
	p := mustLoad(t, composeFile, composeTestFile)
	pg, maria, boot, mysql := service(t, p, "postgres"), service(t, p, "mariadb"), service(t, p, "minio-bootstrap"), service(t, p, "mysql")
	pgSQL, err := os.ReadFile(repoPath(t, "compose/postgres/10-cluecdc-fixture.sql"))
	if err != nil {
		t.Fatal(err)
	}
	fromEnv := func(s types.ServiceConfig, k string) string { v, _ := env(s, k); return v }
	compose := map[string]struct{ got, where string }{
		"PG_SUPERUSER":          {fromEnv(pg, "POSTGRES_USER"), "service \"postgres\": environment.POSTGRES_USER"},
		"PG_SUPERUSER_PASSWORD": {fromEnv(pg, "POSTGRES_PASSWORD"), "service \"postgres\": environment.POSTGRES_PASSWORD"},
		"MARIADB_USER":          {fromEnv(maria, "MARIADB_USER"), "service \"mariadb\": environment.MARIADB_USER"},
		"MARIADB_PASSWORD":      {fromEnv(maria, "MARIADB_PASSWORD"), "service \"mariadb\": environment.MARIADB_PASSWORD"},
		"MARIADB_ROOT_PASSWORD": {fromEnv(maria, "MARIADB_ROOT_PASSWORD"), "service \"mariadb\": environment.MARIADB_ROOT_PASSWORD"},
		"MARIADB_DB":            {fromEnv(maria, "MARIADB_DATABASE"), "service \"mariadb\": environment.MARIADB_DATABASE"},
		"MYSQL_ROOT_PASSWORD":   {fromEnv(mysql, "MYSQL_ROOT_PASSWORD"), "service \"mysql\": environment.MYSQL_ROOT_PASSWORD"},
		"MYSQL_DB":              {fromEnv(mysql, "MYSQL_DATABASE"), "service \"mysql\": environment.MYSQL_DATABASE"},
		"S3_REGION":             {fromEnv(boot, "S3_REGION"), "service \"minio-bootstrap\": environment.S3_REGION"},
		"S3_BUCKET":             {fromEnv(boot, "S3_BUCKET"), "service \"minio-bootstrap\": environment.S3_BUCKET"},
		"S3_ACCESS_KEY":         {fromEnv(boot, "S3_ACCESS_KEY"), "service \"minio-bootstrap\": environment.S3_ACCESS_KEY"},
		"S3_SECRET_KEY":         {fromEnv(boot, "S3_SECRET_KEY"), "service \"minio-bootstrap\": environment.S3_SECRET_KEY"},
	}
	checked := 0
	for _, k := range keys(compose) {
		want, ok := native[k]
		if !ok {
			continue
		}
		checked++
		if compose[k].got != want {
			t.Errorf("%s = %q, but scripts/stack has %s=%q", compose[k].where, compose[k].got, k, want)
		}
	}
	for _, k := range []string{"PG_USER", "PG_PASSWORD", "PG_SOURCE_DB", "PG_DEST_DB"} {
		want, ok := native[k]
		if !ok {
			continue
		}
		checked++
		if !strings.Contains(string(pgSQL), want) {
			t.Errorf("compose/postgres/10-cluecdc-fixture.sql does not create %s=%q of scripts/stack", k, want)
		}
	}
	mysqlSQL, mysqlConfig := mysqlFixtureSQL(t, p)
	for _, k := range []string{"MYSQL_USER", "MYSQL_PASSWORD", "MYSQL_DEST_DB", "MYSQL_DEST_USER", "MYSQL_DEST_PASSWORD"} {
		want, ok := native[k]
		if !ok {
			continue
		}
		checked++
		if !strings.Contains(mysqlSQL, "'"+want+"'") && !strings.Contains(mysqlSQL, "`"+want+"`") {
			t.Errorf("configs.%s (the mysql fixture SQL) does not create %s=%q of scripts/stack", mysqlConfig, k, want)
		}
	}
	if checked == 0 {
		t.Skip("scripts/stack defines none of the fixture variables any more")
	}
}

// ClueCDC puts ${cluecdc:<ref>:<field>} placeholders into connector configs; the connect service
// must load the provider (built into the image) and point it at the cluecdc service with a token.
func TestConnectWorkerConfiguresTheClueCdcConfigProvider(t *testing.T) {
	const class = "io.cluecdc.connect.ClueCdcConfigProvider"
	forEachProject(t, func(t *testing.T, p *types.Project) {
		cfg, where := connectWorkerConfig(t, p)
		aliases := map[string]bool{}
		for _, a := range strings.Split(cfg["config.providers"], ",") {
			aliases[strings.TrimSpace(a)] = true
		}
		if !aliases["cluecdc"] {
			t.Errorf("service \"connect\": config.providers = %q does not list cluecdc (%s)", cfg["config.providers"], where)
		}
		for a := range aliases {
			if a != "" && cfg["config.providers."+a+".class"] == "" {
				t.Errorf("service \"connect\": config.providers lists %q but config.providers.%s.class is not set (%s)", a, a, where)
			}
		}
		if got := cfg["config.providers.cluecdc.class"]; got != class {
			t.Errorf("service \"connect\": config.providers.cluecdc.class = %q, want %s (%s)", got, class, where)
		}
		url := cfg["config.providers.cluecdc.param.url"]
		if url != "http://cluecdc:8080" {
			t.Errorf("service \"connect\": config.providers.cluecdc.param.url = %q, want http://cluecdc:8080 (%s)", url, where)
		}
		if listen, _ := env(service(t, p, "cluecdc"), "CLUECDC_LISTEN"); portOf(listen) != portOf(strings.TrimPrefix(url, "http://")) {
			t.Errorf("service \"connect\": the provider url %q does not use the port cluecdc listens on (CLUECDC_LISTEN=%q)", url, listen)
		}
		token := cfg["config.providers.cluecdc.param.token"]
		if token == "" || strings.ContainsAny(token, " \t") {
			t.Errorf("service \"connect\": config.providers.cluecdc.param.token = %q, want a token without spaces (%s)", token, where)
		}
		if f := cfg["config.providers.cluecdc.param.config.file"]; f != "" {
			t.Errorf("service \"connect\": config.providers.cluecdc.param.config.file = %q is set together with url/token; the provider refuses both (%s)", f, where)
		}
		if ttl := cfg["config.providers.cluecdc.param.ttl.ms"]; ttl != "" {
			t.Errorf("service \"connect\": config.providers.cluecdc.param.ttl.ms = %q; the stack sets no TTL (%s)", ttl, where)
		}
	})

	// The token is never written into the file: it comes from the environment.
	raw, err := os.ReadFile(repoPath(t, composeFile))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*CONNECT_CONFIG_PROVIDERS_CLUECDC_PARAM_TOKEN:\s*\$\{CLUECDC_PROVIDER_TOKEN[:}-]`).Match(raw) {
		t.Errorf("%s: CONNECT_CONFIG_PROVIDERS_CLUECDC_PARAM_TOKEN must come from ${CLUECDC_PROVIDER_TOKEN...}", composeFile)
	}

	// The image builds the provider from its pom and puts it on the plugin path.
	p := mustLoad(t, composeFile)
	c := service(t, p, "connect")
	cfg, _ := connectWorkerConfig(t, p)
	ins := parseDockerfile(t, filepath.Join(c.Build.Context, c.Build.Dockerfile))
	built, copied := false, false
	for _, in := range instructionsNamed(ins, "RUN") {
		built = built || strings.Contains(in.args, "-f config-provider/pom.xml")
	}
	for _, in := range instructionsNamed(ins, "COPY") {
		fields := strings.Fields(in.args)
		if len(fields) > 0 && strings.HasPrefix(fields[len(fields)-1], strings.TrimSuffix(cfg["plugin.path"], "/")+"/cluecdc-config-provider") {
			copied = true
		}
	}
	if !built {
		t.Errorf("connect-image/Dockerfile: no RUN builds the provider with mvn -f config-provider/pom.xml")
	}
	if !copied {
		t.Errorf("connect-image/Dockerfile: the provider jar is not copied to %s/cluecdc-config-provider", cfg["plugin.path"])
	}

	// The native stack configures the same aliases (tests run against either).
	stack, err := os.ReadFile(repoPath(t, "scripts/stack"))
	if err != nil {
		t.Skipf("scripts/stack not readable: %v", err)
	}
	native := ""
	if m := regexp.MustCompile(`(?m)^config\.providers=(\S+)$`).FindSubmatch(stack); m != nil {
		native = string(m[1])
	}
	if native != cfg["config.providers"] {
		t.Errorf("scripts/stack writes config.providers=%q, the connect service has %q", native, cfg["config.providers"])
	}
}

// The Aiven S3 sink is not on Maven Central: the image must install the pinned release archive,
// checked against its SHA-512, and nothing may build it from source.
func TestConnectImageInstallsTheAivenReleaseArchiveByChecksum(t *testing.T) {
	lock := readLock(t)
	url := lockValue(t, lock, "AIVEN_S3_ARCHIVE_URL")
	sum := lockValue(t, lock, "AIVEN_S3_ARCHIVE_SHA512")
	version := lockValue(t, lock, "AIVEN_S3_VERSION")
	if !regexp.MustCompile(`^[0-9a-f]{128}$`).MatchString(sum) {
		t.Errorf("%s: AIVEN_S3_ARCHIVE_SHA512=%q is not a SHA-512 hex digest", versionsLock, sum)
	}
	if !strings.HasSuffix(url, "/v"+version+"/s3-sink-connector-for-apache-kafka-"+version+".zip") {
		t.Errorf("%s: AIVEN_S3_ARCHIVE_URL=%q is not the v%s release asset", versionsLock, url, version)
	}
	for _, k := range []string{"AIVEN_S3_UPSTREAM_COMMIT", "AIVEN_S3_SOURCE_SHA256", "AIVEN_S3_DEPS_SHA256"} {
		if _, ok := lock[k]; ok {
			t.Errorf("%s: %s is left from building the sink from source", versionsLock, k)
		}
	}
	var run string
	for _, in := range instructionsNamed(parseDockerfile(t, repoPath(t, "connect-image/Dockerfile")), "RUN") {
		if strings.Contains(in.args, "AIVEN_S3_ARCHIVE_URL") {
			run = in.args
		}
	}
	for _, needle := range []string{`. ./versions.lock`, `"$AIVEN_S3_ARCHIVE_URL"`, `$AIVEN_S3_ARCHIVE_SHA512`, `sha512sum -c`} {
		if !strings.Contains(run, needle) {
			t.Errorf("connect-image/Dockerfile: the Aiven download step does not contain %s", needle)
		}
	}
	if i, j := strings.Index(run, "sha512sum -c"), strings.Index(run, "unzip"); i < 0 || j < i {
		t.Errorf("connect-image/Dockerfile: the SHA-512 check must run before unzip")
	}
	if _, err := os.Stat(repoPath(t, "connect-image/maven/aiven-s3-sink")); err == nil {
		t.Errorf("connect-image/maven/aiven-s3-sink exists: the sink must not be built from source")
	}
}
