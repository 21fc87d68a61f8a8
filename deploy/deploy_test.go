// Package deploy_test checks what deploy/ gives operators against the
// code: the Prometheus alert rules and the Grafana dashboard may only
// use metrics the components register, the operating guide
// (docs/operating.md) lists them all, and the systemd units keep their
// hardening.
package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sandboxd/sandboxd/agent/agentmetrics"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// registered collects the metric names every component registers: a
// running server's registry, an edge's and an agent's.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	s := st.Single(t, st.Options{})
	e, err := edge.New(edge.Config{ControlPlane: []string{s.ClusterURL()}, Creds: st.Member(t, s, pki.RoleEdge, "edge-1"), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	names := map[string]bool{}
	for _, list := range [][]string{s.MetricNames(), e.MetricNames(), agentmetrics.New().Names()} {
		for _, n := range list {
			names[n] = true
		}
	}
	return names
}

// prometheusOwn are series Prometheus makes itself for every target.
var prometheusOwn = map[string]bool{"up": true}

var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	grafanaVars  = regexp.MustCompile(`\$\{?\w+\}?`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

// metricsIn lists the metric names a PromQL expression selects: what is
// left once strings, label matchers, ranges, grouping labels, functions
// and keywords are taken out.
func metricsIn(expr string) []string {
	for _, re := range []*regexp.Regexp{promStrings, promMatchers, promRanges, promGrouping, grafanaVars} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(expr[loc[0]-1:loc[0]], "0123456789.") {
			continue // the exponent or unit of a number: 1e3, 5m
		}
		if strings.HasPrefix(strings.TrimSpace(expr[loc[1]:]), "(") || promKeywords[strings.ToLower(name)] {
			continue // a function call, or a keyword
		}
		out = append(out, name)
	}
	return out
}

// known reports whether a selected name is a registered family, a
// histogram's or summary's series of one, or Prometheus' own.
func known(names map[string]bool, name string) bool {
	if names[name] || prometheusOwn[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

func TestMetricsIn(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum(sandboxd_raft_state{state="Leader"}) < 1`, []string{"sandboxd_raft_state"}},
		{`histogram_quantile(0.99, sum by (le, instance) (rate(sandboxd_raft_apply_duration_seconds_bucket[5m]))) > 0.5`,
			[]string{"sandboxd_raft_apply_duration_seconds_bucket"}},
		{`a_total / on (x) group_left (y) b offset 1h > 1e3 and bool c`, []string{"a_total", "b", "c"}},
		{`rate(x_count[$__rate_interval])`, []string{"x_count"}},
		{`up{job="sandboxd-server"} == 0`, []string{"up"}},
	}
	for _, tt := range tests {
		if got := metricsIn(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricsIn(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

// alertRules is the rule file's shape.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var promDuration = regexp.MustCompile(`^(?:\d+(?:ms|s|m|h|d|w|y))+$`)

// TestAlertRules parses deploy/prometheus/alerts.yml strictly, checks
// each rule's shape, that the alerts the operator guide promises exist,
// and that every expression selects only metrics the code registers.
// promtool, when installed (install-deps.sh installs it), checks the
// PromQL itself.
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	names := registered(t)
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a name and rules are required", g.Name)
		}
		for _, r := range g.Rules {
			t.Run(r.Alert, func(t *testing.T) {
				switch {
				case r.Alert == "" || r.Record != "":
					t.Fatalf("only alerting rules belong here: %+v", r)
				case seen[r.Alert]:
					t.Fatalf("alert %s defined twice", r.Alert)
				case strings.TrimSpace(r.Expr) == "":
					t.Fatal("no expr")
				case r.For != "" && !promDuration.MatchString(r.For):
					t.Fatalf("for: %q is not a Prometheus duration", r.For)
				case !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]):
					t.Fatalf("severity %q: use critical, warning or info", r.Labels["severity"])
				case r.Annotations["summary"] == "" || r.Annotations["description"] == "":
					t.Fatal("a summary and a description are required")
				}
				seen[r.Alert] = true
				selected := metricsIn(r.Expr)
				if len(selected) == 0 {
					t.Fatalf("expr selects no metric: %s", r.Expr)
				}
				for _, m := range selected {
					if !known(names, m) {
						t.Errorf("expr uses %s, which no component registers", m)
					}
				}
			})
		}
	}
	for _, want := range []string{"SandboxdNodeDown", "SandboxdNoRaftLeader", "SandboxdRaftApplyLatencyHigh", "SandboxdJobFailuresRising",
		"SandboxdEdge5xxRatioHigh", "SandboxdWebhookFailures", "SandboxdWarmPoolEmpty"} {
		if !seen[want] {
			t.Errorf("alert %s missing", want)
		}
	}
	promtool(t, "check", "rules", filepath.Join("prometheus", "alerts.yml"))
	// The rules' own unit tests: given series, which alerts fire, with
	// which labels and texts.
	promtool(t, "test", "rules", filepath.Join("prometheus", "alerts_test.yml"))
}

// promtool runs Prometheus' own checks (check rules, test rules) when
// promtool is installed.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: PromQL not checked (deploy/dev/install-deps.sh installs it)")
		return
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// TestGrafanaDashboard: the dashboard parses, its panels have unique ids
// and query the Prometheus data source variable, its queries select only
// registered metrics, and it shows what the operator guide says it does.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("grafana", "sandboxd.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("sandboxd.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Fatal("uid and title are required")
	}
	if len(d.Templating.List) == 0 || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Fatalf("the first variable must pick the Prometheus data source: %+v", d.Templating.List)
	}
	if strings.Count(string(raw), `"uid": "${datasource}"`) == 0 {
		t.Fatal("panels do not query the data source variable")
	}
	names := registered(t)
	ids := map[int]bool{}
	used := map[string]bool{}
	var exprs []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
				for _, m := range metricsIn(tg.Expr) {
					used[m] = true
					if !known(names, m) {
						t.Errorf("panel %q uses %s, which no component registers", p.Title, m)
					}
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, want := range []string{"sandboxd_sites", "sandboxd_job_duration_seconds_bucket", "sandboxd_raft_commit_duration_seconds_bucket",
		"sandboxd_raft_apply_duration_seconds_bucket", "sandboxd_node_heartbeats_total", "sandboxd_nodes",
		"sandboxd_edge_request_duration_seconds_bucket", "sandboxd_pool_sites", "sandboxd_webhook_attempts_total"} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
	// promtool parses the queries as recording rules.
	if _, err := exec.LookPath("promtool"); err == nil {
		rules := "groups:\n  - name: dashboard\n    rules:\n"
		for i, e := range exprs {
			b, _ := json.Marshal(grafanaVars.ReplaceAllString(e, "5m"))
			rules += "      - record: panel_query_" + strconv.Itoa(i) + "\n        expr: " + string(b) + "\n"
		}
		path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
		if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
			t.Fatal(err)
		}
		promtool(t, "check", "rules", path)
	}
}

// TestOperatingListsEveryMetric keeps the Monitoring section of the
// operating guide (docs/operating.md) in step with the code.
func TestOperatingListsEveryMetric(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join("..", "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, monitoring, ok := strings.Cut(string(guide), "\n## Monitoring\n")
	if !ok {
		t.Fatal("docs/operating.md has no Monitoring section")
	}
	monitoring, _, _ = strings.Cut(monitoring, "\n## ")
	for name := range registered(t) {
		if strings.HasPrefix(name, "sandboxd_") && !strings.Contains(monitoring, name) {
			t.Errorf("the Monitoring section of docs/operating.md does not list %s", name)
		}
	}
	for _, path := range []string{"deploy/grafana/sandboxd.json", "deploy/prometheus/alerts.yml"} {
		if !strings.Contains(monitoring, path) {
			t.Errorf("the Monitoring section of docs/operating.md does not point to %s", path)
		}
	}
	if !strings.Contains(string(guide), "deploy/systemd/") {
		t.Error("docs/operating.md does not point to deploy/systemd/")
	}
}
