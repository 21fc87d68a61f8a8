package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// bakeAgent is a step agent that also freezes templates and exports
// their artifacts, and records the builds it froze.
type bakeAgent struct {
	*stepAgent
	fmu    sync.Mutex
	frozen []string
}

func (f *bakeAgent) FreezeTemplate(_ context.Context, req *connect.Request[agentv1.FreezeTemplateRequest]) (*connect.Response[agentv1.TemplateInfo], error) {
	f.fmu.Lock()
	defer f.fmu.Unlock()
	f.frozen = append(f.frozen, req.Msg.TemplateId)
	return connect.NewResponse(&agentv1.TemplateInfo{TemplateId: req.Msg.TemplateId, SizeBytes: 1 << 20, PhpVersion: "8.2", WordpressVersion: "6.8.1"}), nil
}

func (f *bakeAgent) ExportTemplate(_ context.Context, req *connect.Request[agentv1.TemplateRef], out *connect.ServerStream[agentv1.Chunk]) error {
	return out.Send(&agentv1.Chunk{Data: []byte("artifact of " + req.Msg.TemplateId)})
}

// TestRebakeKeepsTheTemplate: a rebake answers, and ends with, the same
// template: its id, slug and launch token stay; its build (what sites are
// cloned from) is the new one; the rebuild in progress is never listed;
// a site made from the template afterwards is cloned from the new build
// and still says it is made from the template's id.
func TestRebakeKeepsTheTemplate(t *testing.T) {
	s := st.Single(t, st.Options{})
	agent := &bakeAgent{stepAgent: &stepAgent{}}
	agent.url = serveAgent(t, agent)
	n := state.Node{ID: "node-fake", Address: agent.url, BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady,
		MemoryMB: 64 << 10, MaxSites: 100}
	if _, err := s.Node().Apply(context.Background(), fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bp := alice.Do("POST", "/api/app/blueprints", map[string]any{"name": "Shop", "source": `{"steps":[]}`}).Must(t, 201).Str("blueprint.id")
	waitTemplate := func(id string) *st.Response {
		t.Helper()
		var r *st.Response
		st.WaitFor(t, 20*time.Second, "template "+id+" ready", func() bool {
			r = alice.Do("GET", "/api/app/templates/"+id, nil)
			return r.Status == 200 && r.Str("template.status") == "ready"
		})
		return r
	}
	bake := alice.Do("POST", "/api/app/blueprints/"+bp+"/bake", map[string]any{"name": "Shop"}).Must(t, 202)
	id := bake.Str("template.id")
	waitRun(t, alice, bp, bake.Str("run.id"))
	waitTemplate(id)
	launch := alice.Do("PATCH", "/api/app/templates/"+id, map[string]any{"launchEnabled": true}).Must(t, 200)
	slug, token := launch.Str("template.slug"), launch.Str("template.launchToken")

	rebake := alice.Do("POST", "/api/app/blueprints/"+bp+"/bake", map[string]any{"templateId": id}).Must(t, 202)
	if rebake.Str("template.id") != id || rebake.Str("run.templateId") != id {
		t.Fatalf("the rebake answers another template: %s", rebake.Raw)
	}
	if n := len(alice.Do("GET", "/api/app/templates", nil).Must(t, 200).List("templates")); n != 1 {
		t.Fatalf("%d templates listed during a rebake, want 1", n)
	}
	if run := waitRun(t, alice, bp, rebake.Str("run.id")); run.Str("run.status") != "succeeded" || run.Str("run.templateId") != id {
		t.Fatalf("rebake run: %s", run.Raw)
	}
	var after *st.Response
	st.WaitFor(t, 20*time.Second, "the rebuild folded into the template", func() bool {
		agent.fmu.Lock()
		n := len(agent.frozen)
		agent.fmu.Unlock()
		after = alice.Do("GET", "/api/app/templates/"+id, nil).Must(t, 200)
		return n == 2 && len(alice.Do("GET", "/api/app/templates", nil).Must(t, 200).List("templates")) == 1 &&
			after.Str("template.updatedAt") != launch.Str("template.updatedAt")
	})
	if after.Str("template.slug") != slug || after.Str("template.launchToken") != token || after.Str("template.status") != "ready" {
		t.Fatalf("after the rebake: %s", after.Raw)
	}
	tpl, err := s.Node().Store().Template(id)
	if err != nil || tpl == nil {
		t.Fatalf("template %s: %v", id, err)
	}
	agent.fmu.Lock()
	rebuilt := agent.frozen[1]
	agent.fmu.Unlock()
	if tpl.BuildID() != rebuilt || rebuilt == id {
		t.Fatalf("the template's build is %s, the rebuild froze %s", tpl.BuildID(), rebuilt)
	}
	site := alice.Do("POST", "/api/app/templates/"+id+"/sites", map[string]any{"name": "From the rebake"}).Must(t, 202)
	if site.Str("site.templateId") != id {
		t.Fatalf("a site of the rebaked template: %s", site.Raw)
	}
	if got, _ := s.Node().Store().Site(site.Str("site.id")); got == nil || got.TemplateBuildID() != rebuilt {
		t.Fatalf("the site is cloned from build %v, want %s", got, rebuilt)
	}
}
