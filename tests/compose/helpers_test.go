// Package compose checks that compose.yaml and compose.test.yaml are valid Compose files and agree
// with each other, with the Dockerfiles they build and with connect-image/versions.lock.
//
// No container engine is needed: the files are loaded with compose-go, the loader that the
// docker compose CLI itself uses, with JSON-schema validation on.
package compose

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

const (
	composeFile     = "compose.yaml"
	composeTestFile = "compose.test.yaml"
	versionsLock    = "connect-image/versions.lock"
	minioDockerfile = "compose/minio/Dockerfile"
)

// repoRoot is the repository root: go test runs in tests/compose.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("resolving the repository root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, composeFile)); err != nil {
		t.Fatalf("%s not found at the repository root %s: %v", composeFile, root, err)
	}
	return root
}

func repoPath(t *testing.T, rel string) string {
	t.Helper()
	return filepath.Join(repoRoot(t), filepath.FromSlash(rel))
}

// loadProject loads the given compose files (later files override earlier ones, like repeated
// `docker compose -f`) with schema validation on. The environment is empty on purpose: the result
// must not depend on the shell or on a stray .env file. consistency=false skips compose-go's own
// cross-reference check, so that the specific tests below can report a precise message instead.
func loadProject(t *testing.T, consistency bool, files ...string) (*types.Project, error) {
	t.Helper()
	return loadProjectWithProfiles(t, consistency, nil, files...)
}

// loadProjectWithProfiles is loadProject with compose profiles enabled, like
// `docker compose --profile NAME`; services of other profiles land in DisabledServices.
func loadProjectWithProfiles(t *testing.T, consistency bool, profiles []string, files ...string) (*types.Project, error) {
	t.Helper()
	return loadWith(t, consistency, profiles, map[string]string{}, files...)
}

// loadWith is loadProjectWithProfiles with the given environment for interpolation.
func loadWith(t *testing.T, consistency bool, profiles []string, environment map[string]string, files ...string) (*types.Project, error) {
	t.Helper()
	root := repoRoot(t)
	details := types.ConfigDetails{WorkingDir: root, Environment: environment}
	for _, f := range files {
		details.ConfigFiles = append(details.ConfigFiles, types.ConfigFile{Filename: filepath.Join(root, f)})
	}
	return loader.LoadWithContext(context.Background(), details, func(o *loader.Options) {
		o.SkipValidation = false
		o.SkipConsistencyCheck = !consistency
		o.SkipInterpolation = false
		o.Profiles = profiles
	})
}

// project variants every cross-check runs against.
type variant struct {
	name     string
	files    []string
	profiles []string
}

// haProfile is compose.yaml's profile of replicas on PostgreSQL metadata behind a load balancer.
const haProfile = "ha"

var variants = []variant{
	{"compose.yaml", []string{composeFile}, nil},
	{"compose.yaml+compose.test.yaml", []string{composeFile, composeTestFile}, nil},
	{"compose.yaml --profile ha", []string{composeFile}, []string{haProfile}},
}

// forEachProject runs fn once per variant on a loaded project, as a named subtest.
func forEachProject(t *testing.T, fn func(t *testing.T, p *types.Project)) {
	t.Helper()
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p, err := loadProjectWithProfiles(t, false, v.profiles, v.files...)
			if err != nil {
				t.Fatalf("loading %s: %v", strings.Join(v.files, " + "), err)
			}
			fn(t, p)
		})
	}
}

func mustLoad(t *testing.T, files ...string) *types.Project {
	t.Helper()
	p, err := loadProject(t, false, files...)
	if err != nil {
		t.Fatalf("loading %s: %v", strings.Join(files, " + "), err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("service %q is missing (services: %s)", name, strings.Join(p.ServiceNames(), ", "))
	}
	return s
}

func sortedServices(p *types.Project) []types.ServiceConfig {
	var out []types.ServiceConfig
	for _, name := range p.ServiceNames() {
		out = append(out, p.Services[name])
	}
	return out
}

// env returns a service's environment value and whether it is set.
func env(s types.ServiceConfig, key string) (string, bool) {
	v, ok := s.Environment[key]
	if !ok || v == nil {
		return "", false
	}
	return *v, true
}

// buildArg returns a service's build arg value and whether it is set.
func buildArg(s types.ServiceConfig, key string) (string, bool) {
	if s.Build == nil {
		return "", false
	}
	v, ok := s.Build.Args[key]
	if !ok || v == nil {
		return "", false
	}
	return *v, true
}

// ---- versions.lock ------------------------------------------------------------------------------

var lockLine = regexp.MustCompile(`^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)

// readLock parses the shell-sourceable KEY=value pin file; `#` starts a comment line.
func readLock(t *testing.T) map[string]string {
	t.Helper()
	path := repoPath(t, versionsLock)
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%s: %v (the compose files are checked against it)", versionsLock, err)
	}
	defer f.Close()
	lock := map[string]string{}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := lockLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s:%d: not a KEY=value line: %q", versionsLock, n, line)
		}
		val := m[2]
		if i := strings.Index(val, " #"); i >= 0 && !strings.HasPrefix(val, `"`) && !strings.HasPrefix(val, `'`) {
			val = val[:i]
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && (val[0] == '"' && val[len(val)-1] == '"' || val[0] == '\'' && val[len(val)-1] == '\'') {
			val = val[1 : len(val)-1]
		}
		if prev, dup := lock[m[1]]; dup && prev != val {
			t.Fatalf("%s:%d: %s is set twice (%q, then %q)", versionsLock, n, m[1], prev, val)
		}
		lock[m[1]] = val
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", versionsLock, err)
	}
	return lock
}

func lockValue(t *testing.T, lock map[string]string, key string) string {
	t.Helper()
	v, ok := lock[key]
	if !ok || v == "" {
		t.Fatalf("%s has no %s", versionsLock, key)
	}
	return v
}

// ---- Dockerfiles --------------------------------------------------------------------------------

// instruction is one Dockerfile instruction after line continuations are joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, ARG, RUN, ...
	args string
}

// parseDockerfile is a small Dockerfile reader: comments and parser directives are dropped,
// backslash continuations joined. Enough to check instructions and ARG defaults.
func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimRight(raw, " \t\r")
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // comment lines inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(line)
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		cmd, args, _ := strings.Cut(text, " ")
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
	}
	if cur.Len() > 0 {
		t.Fatalf("%s: ends inside a continued instruction", path)
	}
	return out
}

// argDefaults returns every `ARG NAME=default` of a Dockerfile, per name, in file order.
func argDefaults(ins []instruction) map[string][]string {
	out := map[string][]string{}
	for _, in := range ins {
		if in.cmd != "ARG" {
			continue
		}
		name, def, ok := strings.Cut(in.args, "=")
		if !ok {
			continue
		}
		out[strings.TrimSpace(name)] = append(out[strings.TrimSpace(name)], strings.Trim(strings.TrimSpace(def), `"'`))
	}
	return out
}

func instructionsNamed(ins []instruction, cmd string) []instruction {
	var out []instruction
	for _, in := range ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// ---- Kafka listeners ----------------------------------------------------------------------------

// listenerMap parses "NAME://host:port,NAME2://host:port" into name -> host:port.
func listenerMap(spec string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "://")
		if !ok {
			return nil, fmt.Errorf("listener %q has no NAME://", item)
		}
		out[strings.ToUpper(name)] = addr
	}
	return out, nil
}

func portOf(addr string) string {
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		return addr[i+1:]
	}
	return ""
}

func hostOf(addr string) string {
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		return addr[:i]
	}
	return addr
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ---- Kafka Connect worker configuration -----------------------------------------------------------

// connectDefault matches one default of the connect image's entrypoint, `  [key]=value`.
var connectDefault = regexp.MustCompile(`^\s*\[([a-z0-9._-]+)\]=(.*)$`)

// connectEnvKey maps CONNECT_<NAME> to a worker property name the way the connect image's
// entrypoint does: lower-case, "___" -> "-", "__" -> "_", "_" -> ".".
func connectEnvKey(name string) string {
	k := strings.ToLower(name)
	k = strings.ReplaceAll(k, "___", "-")
	k = strings.ReplaceAll(k, "__", "\x00")
	k = strings.ReplaceAll(k, "_", ".")
	return strings.ReplaceAll(k, "\x00", "_")
}

// connectWorkerConfig returns the effective Connect worker properties of the connect service and
// a description of where they came from (for failure messages): the defaults baked into the
// image's entrypoint (connect-image/Dockerfile), then any worker .properties file bind-mounted
// from the repository, then CONNECT_* environment variables, which win like in the entrypoint.
func connectWorkerConfig(t *testing.T, p *types.Project) (map[string]string, string) {
	t.Helper()
	c := service(t, p, "connect")
	cfg := map[string]string{}
	var from []string
	if c.Build != nil {
		df := c.Build.Dockerfile
		if !filepath.IsAbs(df) {
			df = filepath.Join(c.Build.Context, df)
		}
		if data, err := os.ReadFile(df); err == nil {
			n := 0
			for _, line := range strings.Split(string(data), "\n") {
				if m := connectDefault.FindStringSubmatch(line); m != nil {
					cfg[m[1]] = strings.TrimSpace(m[2])
					n++
				}
			}
			if n > 0 {
				rel, _ := filepath.Rel(repoRoot(t), df)
				from = append(from, rel+" entrypoint defaults")
			}
		}
	}
	for _, v := range c.Volumes {
		if v.Type != types.VolumeTypeBind || !strings.HasSuffix(v.Source, ".properties") {
			continue
		}
		props, err := readProperties(v.Source)
		if err != nil {
			t.Fatalf("service \"connect\": volume %s: %v", v.Source, err)
		}
		for k, val := range props {
			cfg[k] = val
		}
		rel, _ := filepath.Rel(repoRoot(t), v.Source)
		from = append(from, rel)
	}
	envUsed := false
	for _, k := range keys(c.Environment) {
		name, ok := strings.CutPrefix(k, "CONNECT_")
		if !ok {
			continue
		}
		val, _ := env(c, k)
		cfg[connectEnvKey(name)] = val
		envUsed = true
	}
	if envUsed {
		from = append(from, "CONNECT_* environment")
	}
	if len(from) == 0 {
		t.Fatalf("service \"connect\": no worker configuration found (no entrypoint defaults, mounted .properties file or CONNECT_* environment)")
	}
	return cfg, strings.Join(from, " + ")
}

// readProperties reads a Java .properties file (key=value or key: value; # and ! comments;
// backslash continuations).
func readProperties(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var cur strings.Builder
	for _, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`))
			continue
		}
		cur.WriteString(line)
		entry := cur.String()
		cur.Reset()
		i := strings.IndexAny(entry, "=:")
		if i < 0 {
			out[entry] = ""
			continue
		}
		out[strings.TrimSpace(entry[:i])] = strings.TrimSpace(entry[i+1:])
	}
	return out, nil
}

func TestConnectEnvironmentNamesMapToWorkerPropertiesLikeTheImageEntrypoint(t *testing.T) {
	cases := map[string]string{
		"BOOTSTRAP_SERVERS":                          "bootstrap.servers",
		"KEY_CONVERTER_SCHEMAS_ENABLE":               "key.converter.schemas.enable",
		"CONNECTOR_CLIENT_CONFIG_OVERRIDE_POLICY":    "connector.client.config.override.policy",
		"CONFIG_PROVIDERS_CLUECDC_PARAM_TOKEN__FILE": "config.providers.cluecdc.param.token_file",
		"SOME___DASHED_KEY":                          "some-dashed.key",
	}
	for in, want := range cases {
		if got := connectEnvKey(in); got != want {
			t.Errorf("CONNECT_%s maps to %q, want %q", in, got, want)
		}
	}
}
