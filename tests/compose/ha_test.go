package compose

// compose.yaml's `ha` profile (issue 33): ClueCDC replicas on one PostgreSQL metadata database
// behind HAProxy, next to the single-binary default, which the profile must leave unchanged.

import (
	"bufio"
	"net/url"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
)

// defaultServices is what `docker compose up` runs without a profile: the single binary on
// embedded SQLite (serve + worker) and its data plane.
var defaultServices = []string{"cluecdc", "cluecdc-worker", "connect", "kafka", "postgres", "shop-trickle"}

func mustLoadHA(t *testing.T) *types.Project {
	t.Helper()
	p, err := loadProjectWithProfiles(t, true, []string{haProfile}, composeFile)
	if err != nil {
		t.Fatalf("%s with --profile %s does not load with schema validation and consistency checks: %v", composeFile, haProfile, err)
	}
	return p
}

// replicas are the services of the ha profile that run `cluecdc serve` on a database URL.
func replicas(t *testing.T, p *types.Project) []types.ServiceConfig {
	t.Helper()
	var out []types.ServiceConfig
	for _, s := range sortedServices(p) {
		if _, ok := env(s, "CLUECDC_DATABASE_URL"); ok && strings.Join(s.Command, " ") == "serve" {
			out = append(out, s)
		}
	}
	if len(out) < 2 {
		t.Fatalf("--profile %s: %d service(s) run `serve` with CLUECDC_DATABASE_URL, want at least 2 replicas", haProfile, len(out))
	}
	return out
}

func hasProfile(s types.ServiceConfig, name string) bool {
	for _, p := range s.Profiles {
		if p == name {
			return true
		}
	}
	return false
}

func TestTheDefaultProjectIsTheSingleBinaryAndRunsNoHaService(t *testing.T) {
	p := mustLoad(t, composeFile)
	got := p.ServiceNames()
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(defaultServices, " ") {
		t.Errorf("without a profile %s runs %v, want exactly %v", composeFile, got, defaultServices)
	}
	for _, s := range sortedServices(p) {
		if _, ok := env(s, "CLUECDC_DATABASE_URL"); ok {
			t.Errorf("service %q: sets CLUECDC_DATABASE_URL; the default stays on embedded SQLite", s.Name)
		}
	}
	ha := mustLoadHA(t)
	for _, s := range sortedServices(ha) {
		isDefault := false
		for _, d := range defaultServices {
			isDefault = isDefault || d == s.Name
		}
		if !isDefault && !hasProfile(s, haProfile) {
			t.Errorf("service %q: runs with --profile %s but is not in that profile", s.Name, haProfile)
		}
	}
}

func TestTheHaReplicasShareOneDatabaseWhoseUrlCarriesNoPassword(t *testing.T) {
	p := mustLoadHA(t)
	rs := replicas(t, p)
	first, _ := env(rs[0], "CLUECDC_DATABASE_URL")
	for _, r := range rs {
		raw, _ := env(r, "CLUECDC_DATABASE_URL")
		if raw != first {
			t.Errorf("service %q: CLUECDC_DATABASE_URL = %q, service %q has %q: replicas share one database", r.Name, raw, rs[0].Name, first)
		}
		if r.Image != rs[0].Image {
			t.Errorf("service %q: image = %q, service %q runs %q", r.Name, r.Image, rs[0].Name, rs[0].Image)
		}
		if _, ok := env(r, "CLUECDC_DATABASE_PASSWORD"); ok {
			t.Errorf("service %q: sets CLUECDC_DATABASE_PASSWORD inline; read it from a secret with CLUECDC_DATABASE_PASSWORD_FILE", r.Name)
		}
		file, ok := env(r, "CLUECDC_DATABASE_PASSWORD_FILE")
		secret := strings.TrimPrefix(file, "/run/secrets/")
		if !ok || secret == file || !usesSecret(r, secret) {
			t.Errorf("service %q: CLUECDC_DATABASE_PASSWORD_FILE = %q is not a secret the service mounts (secrets: %v)", r.Name, file, secretNames(r))
		}
		if d, ok := r.DependsOn["cluecdc-db"]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("service %q: does not wait for the metadata database to be healthy", r.Name)
		}
	}
	u, err := url.Parse(first)
	if err != nil {
		t.Fatalf("CLUECDC_DATABASE_URL %q: %v", first, err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		t.Errorf("CLUECDC_DATABASE_URL %q is not a postgres:// URL", first)
	}
	if _, has := u.User.Password(); has || strings.Contains(first, "password") {
		t.Errorf("CLUECDC_DATABASE_URL %q carries a password; it belongs in CLUECDC_DATABASE_PASSWORD_FILE", first)
	}
	db, ok := p.Services[u.Hostname()]
	if !ok || !hasProfile(db, haProfile) {
		t.Fatalf("CLUECDC_DATABASE_URL names host %q, which is not a service of the %s profile", u.Hostname(), haProfile)
	}
	if got, _ := env(db, "POSTGRES_USER"); got != u.User.Username() {
		t.Errorf("service %q: POSTGRES_USER = %q, the replicas connect as %q", db.Name, got, u.User.Username())
	}
	if got, _ := env(db, "POSTGRES_DB"); got != strings.TrimPrefix(u.Path, "/") {
		t.Errorf("service %q: POSTGRES_DB = %q, the replicas use database %q", db.Name, got, strings.TrimPrefix(u.Path, "/"))
	}
	if _, inline := env(db, "POSTGRES_PASSWORD"); inline {
		t.Errorf("service %q: POSTGRES_PASSWORD is inline; use POSTGRES_PASSWORD_FILE with the replicas' secret", db.Name)
	}
	rfile, _ := env(rs[0], "CLUECDC_DATABASE_PASSWORD_FILE")
	if got, _ := env(db, "POSTGRES_PASSWORD_FILE"); got != rfile || !usesSecret(db, strings.TrimPrefix(got, "/run/secrets/")) {
		t.Errorf("service %q: POSTGRES_PASSWORD_FILE = %q, the replicas read %q: one secret for both ends", db.Name, got, rfile)
	}
	for _, name := range secretNames(db) {
		sec, ok := p.Secrets[name]
		if !ok || sec.File == "" {
			t.Errorf("secret %q: not declared with a file", name)
			continue
		}
		if _, err := os.Stat(sec.File); err != nil {
			t.Errorf("secret %q: file %s: %v", name, sec.File, err)
		}
	}
}

func TestTheHaReplicasGetTheSameMasterKey(t *testing.T) {
	p := mustLoadHA(t)
	rs := replicas(t, p)
	// The key file and where it comes from (the named volume or secret mounted over its directory).
	source := func(s types.ServiceConfig) (string, string) {
		if _, inline := env(s, "CLUECDC_MASTER_KEY"); inline {
			t.Errorf("service %q: sets CLUECDC_MASTER_KEY inline", s.Name)
		}
		file, ok := env(s, "CLUECDC_MASTER_KEY_FILE")
		if !ok || file == "" {
			t.Errorf("service %q: has no CLUECDC_MASTER_KEY_FILE; without one each replica would generate its own key in its data directory", s.Name)
			return "", ""
		}
		if name, ok := strings.CutPrefix(file, "/run/secrets/"); ok && usesSecret(s, name) {
			return file, "secret " + name
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeVolume && path.Dir(file) == v.Target {
				if !v.ReadOnly {
					t.Errorf("service %q: mounts the key volume %q read-write; replicas only read the key", s.Name, v.Source)
				}
				return file, "volume " + v.Source
			}
		}
		t.Errorf("service %q: CLUECDC_MASTER_KEY_FILE %s is on no secret or named volume", s.Name, file)
		return file, ""
	}
	wantFile, wantFrom := source(rs[0])
	for _, r := range rs[1:] {
		if file, from := source(r); file != wantFile || from != wantFrom {
			t.Errorf("service %q: master key %s from %s, service %q has %s from %s", r.Name, file, from, rs[0].Name, wantFile, wantFrom)
		}
	}
	// A key volume must be filled before any replica starts.
	if vol, ok := strings.CutPrefix(wantFrom, "volume "); ok {
		writer := ""
		for _, s := range sortedServices(p) {
			for _, v := range s.Volumes {
				if v.Source == vol && !v.ReadOnly && isOneShot(s) {
					writer = s.Name
				}
			}
		}
		if writer == "" {
			t.Fatalf("volume %q holds the master key but no one-shot service writes it", vol)
		}
		for _, r := range rs {
			if d, ok := r.DependsOn[writer]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("service %q: does not wait for %q to write the master key", r.Name, writer)
			}
		}
	}
}

func TestTheHaLoadBalancerListsEveryReplicaInARoundRobin(t *testing.T) {
	p := mustLoadHA(t)
	rs := replicas(t, p)
	lb := service(t, p, "cluecdc-lb")
	cfgPath := ""
	for _, v := range lb.Volumes {
		if v.Type == types.VolumeTypeBind && strings.HasSuffix(v.Target, "haproxy.cfg") {
			cfgPath = v.Source
		}
	}
	if cfgPath == "" {
		t.Fatalf("service \"cluecdc-lb\": mounts no haproxy.cfg from the repository")
	}
	cfg := readHAProxy(t, cfgPath)
	var backend *haproxySection
	for i := range cfg {
		if cfg[i].kind == "backend" && len(cfg[i].servers) > 0 {
			if backend != nil {
				t.Fatalf("%s: more than one backend with servers", cfgPath)
			}
			backend = &cfg[i]
		}
	}
	if backend == nil {
		t.Fatalf("%s: no backend lists servers", cfgPath)
	}
	if !backend.has("balance roundrobin") {
		t.Errorf("%s: backend %s does not balance roundrobin", cfgPath, backend.name)
	}
	if !backend.has("option httpchk GET /readyz") && !backend.has("option httpchk GET /healthz") {
		t.Errorf("%s: backend %s does not check the replicas on /readyz or /healthz", cfgPath, backend.name)
	}
	listed := map[string]string{}
	for _, addr := range backend.servers {
		listed[hostOf(addr)] = portOf(addr)
	}
	for _, r := range rs {
		listen, _ := env(r, "CLUECDC_LISTEN")
		if port, ok := listed[r.Name]; !ok || port != portOf(listen) {
			t.Errorf("%s: backend %s does not list replica %s at port %s (servers: %v)", cfgPath, backend.name, r.Name, portOf(listen), backend.servers)
		}
		if d, ok := lb.DependsOn[r.Name]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("service \"cluecdc-lb\": does not wait for replica %q to be healthy", r.Name)
		}
	}
	for host := range listed {
		if s, ok := p.Services[host]; !ok || strings.Join(s.Command, " ") != "serve" {
			t.Errorf("%s: backend %s lists %q, which is no replica", cfgPath, backend.name, host)
		}
	}
	// The frontend that forwards to the backend binds the port compose publishes.
	published := false
	for _, sec := range cfg {
		if sec.kind != "frontend" || !sec.has("default_backend "+backend.name) {
			continue
		}
		for _, port := range lb.Ports {
			published = published || sec.has("bind :"+strconv.FormatUint(uint64(port.Target), 10))
		}
	}
	if !published {
		t.Errorf("service \"cluecdc-lb\": publishes %v, but no frontend forwarding to %s binds one of those container ports", lb.Ports, backend.name)
	}
}

func TestTheConnectProviderUrlDefaultsToTheSingleBinaryAndCanNameTheLoadBalancer(t *testing.T) {
	p, err := loadWith(t, true, []string{haProfile}, map[string]string{"CLUECDC_PROVIDER_URL": "http://cluecdc-lb:8080"}, composeFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := connectWorkerConfig(t, p)
	if got := cfg["config.providers.cluecdc.param.url"]; got != "http://cluecdc-lb:8080" {
		t.Errorf("with CLUECDC_PROVIDER_URL set, config.providers.cluecdc.param.url = %q", got)
	}
	// That URL names the load balancer's service and container port.
	lb := service(t, p, "cluecdc-lb")
	if len(lb.Ports) == 0 || lb.Ports[0].Target != 8080 {
		t.Errorf("service \"cluecdc-lb\": ports %v, want container port 8080 (the URL Connect is given)", lb.Ports)
	}
	// Without it, the default project's Connect calls the single binary (checked in detail by
	// TestConnectWorkerConfiguresTheClueCdcConfigProvider).
	def, _ := connectWorkerConfig(t, mustLoad(t, composeFile))
	if got := def["config.providers.cluecdc.param.url"]; got != "http://cluecdc:8080" {
		t.Errorf("without CLUECDC_PROVIDER_URL, config.providers.cluecdc.param.url = %q", got)
	}
}

// Behind the balancer every replica's TCP peer is HAProxy: the balancer must append the
// client's address (option forwardfor) and every replica must trust the balancer's fixed
// address, and no wider range, for the per-address sign-in limit to count clients.
func TestTheHaReplicasTrustOnlyTheBalancersForwardedFor(t *testing.T) {
	p := mustLoadHA(t)
	lb := service(t, p, "cluecdc-lb")
	cfgPath := ""
	for _, v := range lb.Volumes {
		if v.Type == types.VolumeTypeBind && strings.HasSuffix(v.Target, "haproxy.cfg") {
			cfgPath = v.Source
		}
	}
	forwards := false
	for _, sec := range readHAProxy(t, cfgPath) {
		if sec.kind == "defaults" || sec.kind == "backend" || sec.kind == "frontend" {
			forwards = forwards || sec.has("option forwardfor")
		}
	}
	if !forwards {
		t.Errorf("%s: no `option forwardfor`; the replicas would see only the balancer's address", cfgPath)
	}
	var lbAddr string
	for _, n := range lb.Networks {
		if n != nil && n.Ipv4Address != "" {
			lbAddr = n.Ipv4Address
		}
	}
	if lbAddr == "" {
		t.Fatalf("service \"cluecdc-lb\": no fixed ipv4_address for the replicas to trust")
	}
	for _, r := range replicas(t, p) {
		got, _ := env(r, "CLUECDC_TRUSTED_PROXIES")
		if got != lbAddr+"/32" {
			t.Errorf("replica %s: CLUECDC_TRUSTED_PROXIES = %q, want the balancer alone, %s/32", r.Name, got, lbAddr)
		}
	}
}

// ---- helpers ------------------------------------------------------------------------------------

func usesSecret(s types.ServiceConfig, name string) bool {
	for _, n := range secretNames(s) {
		if n == name {
			return true
		}
	}
	return false
}

func secretNames(s types.ServiceConfig) []string {
	var out []string
	for _, sec := range s.Secrets {
		out = append(out, sec.Source)
	}
	return out
}

// haproxySection is one `global`/`defaults`/`frontend`/`backend`/... block of haproxy.cfg.
type haproxySection struct {
	kind, name string
	lines      []string // directives, whitespace collapsed, comments dropped
	servers    []string // `server NAME ADDR ...` addresses
}

func (s haproxySection) has(directive string) bool {
	for _, l := range s.lines {
		if l == directive || strings.HasPrefix(l, directive+" ") {
			return true
		}
	}
	return false
}

func readHAProxy(t *testing.T, file string) []haproxySection {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	defer f.Close()
	var out []haproxySection
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "global", "defaults", "frontend", "backend", "listen", "resolvers", "peers", "userlist":
			if line[0] != ' ' && line[0] != '\t' {
				sec := haproxySection{kind: fields[0]}
				if len(fields) > 1 {
					sec.name = fields[1]
				}
				out = append(out, sec)
				continue
			}
		}
		if len(out) == 0 {
			t.Fatalf("%s: directive %q outside any section", file, line)
		}
		cur := &out[len(out)-1]
		cur.lines = append(cur.lines, strings.Join(fields, " "))
		if fields[0] == "server" && len(fields) >= 3 {
			cur.servers = append(cur.servers, fields[2])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return out
}
