package server_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestJobTypesAreTheDocumentsEnum: the job types that have a runner are
// exactly jobspec.Types, and the document's JobView.type lists them all,
// so no job a client can see breaks the document's enum.
func TestJobTypesAreTheDocumentsEnum(t *testing.T) {
	s := st.Single(t, st.Options{})
	want := slices.Sorted(slices.Values(jobspec.Types))
	if got := s.Dispatcher().Types(); !slices.Equal(got, want) {
		t.Fatalf("job types with a runner %v, jobspec.Types %v: list a new type in jobspec.Types", got, want)
	}
	doc := st.NewClient(t, s.URL(), "").Do("GET", "/api/openapi.json", nil).Must(t, 200)
	var enum []string
	for _, v := range doc.Get("components.schemas.JobView.properties.type.enum").([]any) {
		enum = append(enum, v.(string))
	}
	if !slices.Equal(slices.Sorted(slices.Values(enum)), want) {
		t.Fatalf("the document's job types %v, want %v", enum, want)
	}
}

// TestEveryEnumComesFromItsSet walks every type the routes and webhooks
// answer or take: an enum tag names a set of api.Enums ("@name"), so the
// values come from the code that sends them; only a single literal value
// (a protocol constant, such as OAuth's token_type Bearer) may be written
// out.
func TestEveryEnumComesFromItsSet(t *testing.T) {
	s := st.Single(t, st.Options{})
	sets := api.Enums()
	seen := map[reflect.Type]bool{}
	used := map[string]bool{}
	var walk func(reflect.Type, string)
	walk = func(t0 reflect.Type, where string) {
		for t0.Kind() == reflect.Pointer || t0.Kind() == reflect.Slice || t0.Kind() == reflect.Array || t0.Kind() == reflect.Map {
			t0 = t0.Elem()
		}
		if t0.Kind() != reflect.Struct || seen[t0] {
			return
		}
		seen[t0] = true
		for i := 0; i < t0.NumField(); i++ {
			f := t0.Field(i)
			if tag, ok := f.Tag.Lookup("enum"); ok {
				name, ref := strings.CutPrefix(tag, "@")
				switch {
				case ref && len(sets[name]) == 0:
					t.Errorf("%s.%s (%s): enum @%s is not in api.Enums", t0.Name(), f.Name, where, name)
				case ref:
					used[name] = true
				case strings.Contains(tag, ","):
					t.Errorf("%s.%s (%s): enum %q is written out: name a set of api.Enums (@name) taken from the code's constants", t0.Name(), f.Name, where, tag)
				}
			}
			walk(f.Type, where)
		}
	}
	for _, rt := range s.Router().Routes() {
		for _, v := range []any{rt.Request, rt.Response} {
			if v != nil {
				walk(reflect.TypeOf(v), rt.Pattern())
			}
		}
	}
	doc := s.OpenAPI() // every @name resolves, or this panics
	if doc["webhooks"] == nil {
		t.Fatal("no webhooks in the document")
	}
	for name := range sets {
		if !used[name] && !strings.HasPrefix(name, "webhook") {
			t.Errorf("api.Enums has %s, which no route uses", name)
		}
	}
}
