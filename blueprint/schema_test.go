package blueprint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schema compiles Playground's published Blueprint schema (testdata,
// version 3.1.56) with an independent JSON Schema implementation.
func schema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	raw, err := os.ReadFile("testdata/blueprint-schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "$schema") // "http://json-schema.org/schema" names no draft; it is draft-07
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	// A few patterns (v2 and data-source definitions) use look-ahead,
	// which Go's regexp lacks: ECMAScript's engine, as the schema means.
	c.UseRegexpEngine(func(s string) (jsonschema.Regexp, error) {
		re, err := regexp2.Compile(s, regexp2.ECMAScript)
		if err != nil {
			return nil, err
		}
		return ecmaRegexp{re}, nil
	})
	if err := c.AddResource("blueprint-schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("blueprint-schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ecmaRegexp is an ECMAScript regular expression as the validator wants it.
type ecmaRegexp struct{ re *regexp2.Regexp }

func (e ecmaRegexp) String() string { return e.re.String() }

func (e ecmaRegexp) MatchString(s string) bool {
	ok, err := e.re.MatchString(s)
	return err == nil && ok
}

func gallery(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/gallery/*/blueprint.json")
	if err != nil || len(files) < 20 {
		t.Fatalf("gallery: %d files, %v", len(files), err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(filepath.Dir(f))] = b
	}
	return out
}

func schemaValid(t *testing.T, s *jsonschema.Schema, src []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// TestGalleryAgreesWithSchema: every gallery Blueprint is read, and the
// checker agrees with the published schema (an independent JSON Schema
// implementation) on each: the schema accepts it exactly when the
// checker finds neither a format error nor a deprecated form (which
// Playground, and this service, still run); and once adapted, the schema
// and the checker accept every one.
func TestGalleryAgreesWithSchema(t *testing.T) {
	s := schema(t)
	accepted, adapted := 0, 0
	for name, src := range gallery(t) {
		t.Run(name, func(t *testing.T) {
			serr := schemaValid(t, s, src)
			res := Check(src, Env{Bundle: true})
			if res.Blueprint == nil || len(res.Blueprint.Steps) == 0 && !strings.Contains(string(src), `"steps": []`) {
				t.Fatalf("not read: %+v", res)
			}
			rejects := formatErrors(res.Report)
			for _, f := range res.Report {
				if f.Code == CodeDeprecated {
					rejects = append(rejects, f)
				}
			}
			if (serr == nil) != (len(rejects) == 0) {
				t.Fatalf("schema: %v\nchecker: %+v", serr, rejects)
			}
			if serr == nil {
				accepted++
			}
			ad, err := Adapt(src, Env{Bundle: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := schemaValid(t, s, ad.Source); err != nil {
				t.Fatalf("the adapted source fails the schema: %v\n%s\nchanges: %+v", err, ad.Source, ad.Changes)
			}
			if f := formatErrors(ad.Result.Report); len(f) > 0 {
				t.Fatalf("the adapted source has format errors: %+v", f)
			}
			if len(ad.Changes) > 0 {
				adapted++
			}
		})
	}
	t.Logf("%d gallery Blueprints accepted by the schema as written, %d adapted", accepted, adapted)
}

// formatErrors are the findings about the format itself (not what this
// service has or reaches).
func formatErrors(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		switch f.Code {
		case CodeUnsupportedStep, CodePHPVersionUnavailable, CodeWPVersionUnavailable, CodeWPCLIUnsupported,
			CodeResourceUnreachable, CodeBundledResource, CodePathOutsideSite:
			continue
		}
		if f.Severity == SeverityError {
			out = append(out, f)
		}
	}
	return out
}

// TestCatalogueMatchesSchema: the step catalogue and the resource types
// are the schema's, property for property.
func TestCatalogueMatchesSchema(t *testing.T) {
	raw, _ := os.ReadFile("testdata/blueprint-schema.json")
	var doc struct {
		Definitions map[string]struct {
			OneOf []struct {
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"oneOf"`
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range doc.Definitions["StepDefinition"].OneOf {
		var c struct {
			Const string `json:"const"`
		}
		_ = json.Unmarshal(o.Properties["step"], &c)
		spec, ok := steps[c.Const]
		if !ok {
			t.Errorf("step %q of the schema is not in the catalogue", c.Const)
			continue
		}
		seen[c.Const] = true
		var keys, req []string
		for k := range o.Properties {
			if k != "step" && k != "progress" {
				keys = append(keys, k)
			}
		}
		for _, k := range o.Required {
			if k != "step" {
				req = append(req, k)
			}
		}
		if !sameSet(keys, spec.keys) || !sameSet(req, spec.required) {
			t.Errorf("%s: schema keys %v required %v; catalogue %v %v", c.Const, keys, req, spec.keys, spec.required)
		}
	}
	for name := range steps {
		if !seen[name] {
			t.Errorf("catalogue step %q is not in the schema", name)
		}
	}
	for def, typ := range map[string]string{"VFSReference": "vfs", "LiteralReference": "literal", "CoreThemeReference": "wordpress.org/themes",
		"CorePluginReference": "wordpress.org/plugins", "UrlReference": "url", "BundledReference": "bundled", "ZipWrapperReference": "zip",
		"GitDirectoryReference": "git:directory", "DirectoryLiteralReference": "literal:directory"} {
		d := doc.Definitions[def]
		spec, ok := fileResources[typ]
		if !ok {
			spec = dirResources[typ]
		}
		var keys, req []string
		for k := range d.Properties {
			if k != "resource" {
				keys = append(keys, k)
			}
		}
		for _, k := range d.Required {
			if k != "resource" {
				req = append(req, k)
			}
		}
		if !sameSet(req, spec.required) || !sameSet(keys, append(slices.Clone(spec.required), spec.optional...)) {
			t.Errorf("%s: schema %v required %v; catalogue %v + %v", typ, keys, req, spec.required, spec.optional)
		}
	}
	var top []string
	for k := range doc.Definitions["BlueprintV1Declaration"].Properties {
		top = append(top, k)
	}
	if !sameSet(top, topLevel) {
		t.Errorf("top level: schema %v, checker %v", top, topLevel)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return strings.Join(a, ",") == strings.Join(b, ",")
}
