package blueprint

import (
	"errors"
	"os"
	"strings"
	"testing"
)

var here = Env{PHPVersions: []string{"7.4", "8.2", "8.4"}, WordPressVersions: []string{"5.7", "6.1", "6.8"},
	WordPressOf: map[string]string{"7.4": "5.7", "8.2": "6.1", "8.4": "6.8"}}

// TestBrokenSourcesAgreeWithSchema: sources broken in one way each are
// refused by the schema and by the checker, with the code and path the
// checker names; their fixed twins pass both.
func TestBrokenSourcesAgreeWithSchema(t *testing.T) {
	s := schema(t)
	for _, c := range []struct {
		name, bad, good, code, path, mention string
	}{
		{"unknown step", `{"steps":[{"step":"instalPlugin","pluginData":{"resource":"wordpress.org/plugins","slug":"hello-dolly"}}]}`,
			`{"steps":[{"step":"installPlugin","pluginData":{"resource":"wordpress.org/plugins","slug":"hello-dolly"}}]}`,
			CodeUnknownStep, "steps[0].step", `did you mean "installPlugin"`},
		{"unknown top-level property", `{"preferredVersion":{"php":"8.2","wp":"latest"}}`, `{"preferredVersions":{"php":"8.2","wp":"latest"}}`,
			CodeUnknownProperty, "preferredVersion", `did you mean "preferredVersions"`},
		{"unknown step property", `{"steps":[{"step":"mkdir","path":"/wordpress/x","recursive":true}]}`, `{"steps":[{"step":"mkdir","path":"/wordpress/x"}]}`,
			CodeUnknownProperty, "steps[0].recursive", ""},
		{"missing property", `{"steps":[{"step":"writeFile","path":"/wordpress/a.txt"}]}`, `{"steps":[{"step":"writeFile","path":"/wordpress/a.txt","data":"x"}]}`,
			CodeMissingProperty, "steps[0]", `"data"`},
		{"unknown resource", `{"steps":[{"step":"importWxr","file":{"resource":"https","url":"https://example.com/a.xml"}}]}`,
			`{"steps":[{"step":"importWxr","file":{"resource":"url","url":"https://example.com/a.xml"}}]}`, CodeUnknownResource, "steps[0].file.resource", ""},
		{"resource property", `{"steps":[{"step":"importWxr","file":{"resource":"url","href":"https://example.com/a.xml"}}]}`,
			`{"steps":[{"step":"importWxr","file":{"resource":"url","url":"https://example.com/a.xml"}}]}`, CodeUnknownProperty, "steps[0].file.href", ""},
		{"login half", `{"login":{"username":"editor"}}`, `{"login":{"username":"editor","password":"x"}}`, CodeMissingProperty, "login", "password"},
		{"php version", `{"preferredVersions":{"php":"9.9","wp":"latest"}}`, `{"preferredVersions":{"php":"8.4","wp":"latest"}}`, CodeInvalidValue, "preferredVersions.php", ""},
		{"feature", `{"features":{"networkin":true}}`, `{"features":{"networking":true}}`, CodeUnknownProperty, "features.networkin", `"networking"`},
		{"type", `{"landingPage":5}`, `{"landingPage":"/wp-admin/"}`, CodeInvalidType, "landingPage", ""},
		{"site option", `{"siteOptions":{"blogname":7}}`, `{"siteOptions":{"blogname":"7"}}`, CodeInvalidType, "siteOptions.blogname", ""},
		{"meta", `{"meta":{"title":"x"}}`, `{"meta":{"title":"x","author":"y"}}`, CodeMissingProperty, "meta", "author"},
		{"extra library", `{"extraLibraries":["wp-clii"]}`, `{"extraLibraries":["wp-cli"]}`, CodeInvalidValue, "extraLibraries[0]", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := schemaValid(t, s, []byte(c.bad)); err == nil {
				t.Fatalf("the schema accepts %s", c.bad)
			}
			if err := schemaValid(t, s, []byte(c.good)); err != nil {
				t.Fatalf("the schema refuses %s: %v", c.good, err)
			}
			res := Check([]byte(c.bad), Env{})
			if res.Valid || !has(res.Report, c.code, c.path, c.mention) {
				t.Fatalf("checker on %s: %+v", c.bad, res.Report)
			}
			if good := Check([]byte(c.good), Env{}); !good.Valid {
				t.Fatalf("checker on %s: %+v", c.good, good.Report)
			}
		})
	}
}

func has(fs []Finding, code, path, mention string) bool {
	for _, f := range fs {
		if f.Code == code && f.Path == path && strings.Contains(f.Message, mention) {
			return true
		}
	}
	return false
}

// TestWhatThisServiceRuns: findings about this service, beyond the
// format: images, steps, wp-cli commands, paths, bundles, reachability.
func TestWhatThisServiceRuns(t *testing.T) {
	unreachable := errors.New("not mirrored")
	env := here
	env.Reach = func(u string) error {
		if strings.Contains(u, "unreachable") {
			return unreachable
		}
		return nil
	}
	for _, c := range []struct {
		name, src, code, path, mention string
		severity                       string
	}{
		{"php without an image", `{"preferredVersions":{"php":"8.0","wp":"latest"}}`, CodePHPVersionUnavailable, "preferredVersions.php", "nearest is 8.2", SeverityError},
		{"wp without a build", `{"preferredVersions":{"php":"8.2","wp":"6.5"}}`, CodeWPVersionUnavailable, "preferredVersions.wp", "nearest is 6.8", SeverityError},
		{"wp beta", `{"preferredVersions":{"php":"8.2","wp":"beta"}}`, CodeWPVersionUnavailable, "preferredVersions.wp", "6.8", SeverityError},
		{"php-only", `{"preferredVersions":{"php":"8.2","wp":false}}`, CodeWPVersionUnavailable, "preferredVersions.wp", "always run WordPress", SeverityError},
		{"deprecated php", `{"preferredVersions":{"php":"7.3","wp":"latest"}}`, CodeDeprecated, "preferredVersions.php", "7.4", SeverityWarning},
		{"multisite", `{"steps":[{"step":"enableMultisite"}]}`, CodeUnsupportedStep, "steps[0]", "multisite", SeverityError},
		{"wp-cli command", `{"steps":[{"step":"wp-cli","command":"wp db drop --yes"}]}`, CodeWPCLIUnsupported, "steps[0].command", "wp db", SeverityError},
		{"wp-cli subcommand", `{"steps":[{"step":"wp-cli","command":"wp post delete 1"}]}`, CodeWPCLIUnsupported, "steps[0].command", "wp post delete", SeverityError},
		{"traversal", `{"steps":[{"step":"writeFile","path":"/wordpress/../etc/passwd","data":"x"}]}`, CodePathOutsideSite, "steps[0].path", "outside the site", SeverityError},
		{"relative traversal", `{"steps":[{"step":"mkdir","path":"../../root"}]}`, CodePathOutsideSite, "steps[0].path", "", SeverityError},
		{"bundled without a bundle", `{"steps":[{"step":"runSql","sql":{"resource":"bundled","path":"db.sql"}}]}`, CodeBundledResource, "steps[0].sql", "bundle", SeverityError},
		{"unreachable", `{"steps":[{"step":"importWxr","file":{"resource":"url","url":"https://unreachable.example/a.xml"}}]}`, CodeResourceUnreachable, "steps[0].file.url", "not mirrored", SeverityError},
		{"unreachable plugin", `{"plugins":["unreachable-plugin"]}`, CodeResourceUnreachable, "plugins[0]", "not mirrored", SeverityError},
		{"not http", `{"steps":[{"step":"importWxr","file":{"resource":"url","url":"file:///etc/passwd"}}]}`, CodeInvalidValue, "steps[0].file.url", "", SeverityError},
		{"credentials", `{"steps":[{"step":"importWxr","file":{"resource":"url","url":"https://u:p@example.com/a.xml"}}]}`, CodeInvalidValue, "steps[0].file.url", "", SeverityError},
		{"version 2", `{"version":2}`, CodeUnsupportedVersion, "version", "version 1", SeverityError},
		{"null step", `{"steps":[null,false]}`, CodeIgnoredStep, "steps[1]", "skipped", SeverityInfo},
		{"not an object", `[1,2]`, CodeInvalidJSON, "", "JSON object", SeverityError},
		{"malformed", `{"steps":[`, CodeInvalidJSON, "", "not valid JSON", SeverityError},
		{"two values", `{} {}`, CodeInvalidJSON, "", "more than one", SeverityError},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := Check([]byte(c.src), env)
			found := false
			for _, f := range res.Report {
				if f.Code == c.code && f.Path == c.path && strings.Contains(f.Message, c.mention) && f.Severity == c.severity {
					found = true
				}
			}
			if !found || res.Valid == (c.severity == SeverityError) {
				t.Fatalf("%s: valid %v %+v", c.src, res.Valid, res.Report)
			}
		})
	}
	// In a bundle, bundled files resolve, but not outside it.
	if res := Check([]byte(`{"steps":[{"step":"runSql","sql":{"resource":"bundled","path":"./db.sql"}}]}`), Env{Bundle: true}); !res.Valid {
		t.Fatalf("bundled in a bundle: %+v", res.Report)
	}
	if res := Check([]byte(`{"steps":[{"step":"runSql","sql":{"resource":"bundled","path":"../../etc/passwd"}}]}`), Env{Bundle: true}); res.Valid ||
		!has(res.Report, CodePathOutsideSite, "steps[0].sql.path", "leaves the bundle") {
		t.Fatalf("bundled escape: %+v", res.Report)
	}
}

// TestShorthandsExpand: plugins, siteOptions and constants become steps
// before the steps, login after them, in Playground's order.
func TestShorthandsExpand(t *testing.T) {
	res := Check([]byte(`{"login":true,"constants":{"WP_DEBUG":true},"siteOptions":{"blogname":"Shop"},
		"plugins":["woocommerce",{"resource":"url","url":"https://example.com/p.zip"}],
		"steps":[{"step":"setSiteLanguage","language":"de_DE"}],"landingPage":"/shop/"}`), here)
	if !res.Valid {
		t.Fatalf("%+v", res.Report)
	}
	var got []string
	for _, s := range res.Blueprint.Steps {
		got = append(got, s.Name+"@"+s.Path)
	}
	want := "installPlugin@plugins[0] installPlugin@plugins[1] setSiteOptions@siteOptions defineWpConfigConsts@constants setSiteLanguage@steps[0] login@login"
	if strings.Join(got, " ") != want {
		t.Fatalf("steps %v", got)
	}
	if d := res.Blueprint.Steps[0].Args["pluginData"].(map[string]any); d["slug"] != "woocommerce" || d["resource"] != "wordpress.org/plugins" {
		t.Fatalf("plugin shorthand: %v", d)
	}
	if res.Blueprint.LandingPage != "/shop/" {
		t.Fatalf("landing page %q", res.Blueprint.LandingPage)
	}
}

// TestAdapt: deprecated forms rewritten without review, guesses and
// version changes marked for review, and the result runs here.
func TestAdapt(t *testing.T) {
	src, err := os.ReadFile("testdata/gallery/tt5-demo/blueprint.json")
	if err != nil {
		t.Fatal(err)
	}
	if res := Check(src, here); res.Valid || !has(res.Report, CodeUnknownProperty, "preferredVersion", `did you mean "preferredVersions"`) {
		t.Fatalf("tt5-demo: %+v", res.Report)
	}
	ad, err := Adapt(src, here)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"preferredVersion": true, "preferredVersions.php": false, "preferredVersions.wp": true}
	for path, review := range want {
		found := false
		for _, c := range ad.Changes {
			if c.Path == path && c.ReviewRequired == review {
				found = true
			}
		}
		if !found {
			t.Errorf("no change at %s (review %v): %+v", path, review, ad.Changes)
		}
	}
	if !ad.ReviewRequired() || ad.Result.Blueprint.WordPressVersion != "6.8" || ad.Result.Blueprint.PHPVersion != "latest" {
		t.Fatalf("adapted: %s %+v", ad.Source, ad.Result.Blueprint)
	}

	old := `{"preferredVersions":{"php":"7.2","wp":"latest"},"phpExtensionBundles":["kitchen-sink"],"siteOptions":{"blog_public":1},
		"steps":[{"step":"installPlugin","pluginZipFile":{"resource":"wordpress.org/plugins","slug":"gutenberg"}},{"step":"rmDir","path":"/wordpress/x"}]}`
	ad, err = Adapt([]byte(old), here)
	if err != nil {
		t.Fatal(err)
	}
	if !ad.Result.Valid {
		t.Fatalf("adapted source: %s %+v", ad.Source, ad.Result.Report)
	}
	for _, c := range ad.Changes {
		if c.ReviewRequired != (c.Path == "steps[1].step") {
			t.Errorf("review of %+v", c)
		}
	}
	if !strings.Contains(string(ad.Source), `"pluginData"`) || strings.Contains(string(ad.Source), "pluginZipFile") ||
		!strings.Contains(string(ad.Source), `"7.4"`) || !strings.Contains(string(ad.Source), `"blog_public": "1"`) ||
		!strings.Contains(string(ad.Source), `"rmdir"`) {
		t.Fatalf("adapted: %s", ad.Source)
	}
	if _, err := Adapt([]byte(`[]`), here); err == nil {
		t.Fatal("an array was adapted")
	}
}

func TestSplitCommand(t *testing.T) {
	for in, want := range map[string]string{
		`wp post create --post_title='Welcome to Playground' x.md`: `wp|post|create|--post_title=Welcome to Playground|x.md`,
		`wp option update blogname "A \"quoted\" name"`:            `wp|option|update|blogname|A "quoted" name`,
		`  wp   site empty --yes `:                                 `wp|site|empty|--yes`,
		`wp option update x ''`:                                    `wp|option|update|x|`,
	} {
		got, err := SplitCommand(in)
		if err != nil || strings.Join(got, "|") != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	if _, err := SplitCommand(`wp post create 'open`); err == nil {
		t.Error("an open quote was accepted")
	}
}

func TestNearestAndInSite(t *testing.T) {
	for want, got := range map[string]string{"8.0": "8.2", "8.3": "8.4", "7.2": "7.4", "8.5": "8.4", "5.6": "7.4"} {
		if n := Nearest(want, here.PHPVersions); n != got {
			t.Errorf("Nearest(%s) = %s, want %s", want, n, got)
		}
	}
	for p, ok := range map[string]bool{"/wordpress/wp-content/x": true, "wp-content/x": true, "/wordpress": true, "/wordpressx": false,
		"/wordpress/../etc": false, "/etc/passwd": false, "": false, "a\x00b": false, "../x": false} {
		if InSite(p) != ok {
			t.Errorf("InSite(%q) = %v", p, !ok)
		}
	}
}

func TestRawURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/WordPress/blueprints/blob/trunk/blueprints/tt5-demo/blueprint.json": "https://raw.githubusercontent.com/WordPress/blueprints/trunk/blueprints/tt5-demo/blueprint.json",
		"https://github.com/o/r/raw/v1.2/a/b.json":                                              "https://raw.githubusercontent.com/o/r/v1.2/a/b.json",
		"https://gist.github.com/ndiego/456b74b243d86c97cda89264c68cbdee":                       "https://gist.githubusercontent.com/ndiego/456b74b243d86c97cda89264c68cbdee/raw",
		"https://raw.githubusercontent.com/o/r/main/x.json":                                     "https://raw.githubusercontent.com/o/r/main/x.json",
		"https://github.com/o/r":                                                                "https://github.com/o/r",
		"http://127.0.0.1:8080/bp.json":                                                         "http://127.0.0.1:8080/bp.json",
	} {
		if got := RawURL(in); got != want {
			t.Errorf("RawURL(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestBoundsAndGuesses: a hostile source costs bounded work (no guesses
// for long names, at most 1000 steps, at most 200 findings); a guess
// needs most of the name right; a step without a name is left alone by
// Adapt; PHP and WordPress must be one image's pair.
func TestBoundsAndGuesses(t *testing.T) {
	long := `{"steps":[{"step":"` + strings.Repeat("x", 100000) + `"}]}`
	if res := Check([]byte(long), here); res.Valid || strings.Contains(res.Report[0].Message, "did you mean") {
		t.Fatalf("long name: %.200v", res.Report)
	}
	many := `{"steps":[` + strings.TrimSuffix(strings.Repeat(`{},`, 5000), ",") + `]}`
	res := Check([]byte(many), here)
	if len(res.Report) != maxFindings+1 || res.Report[maxFindings].Code != CodeTooManyFindings || res.Report[0].Code != CodeTooManySteps {
		t.Fatalf("%d findings: first %+v last %+v", len(res.Report), res.Report[0], res.Report[len(res.Report)-1])
	}
	for name, want := range map[string]string{"run": "", "": "", "instalPlugin": "installPlugin", "rmDir": "rmdir", "wpcli": "wp-cli"} {
		if got := suggest(name, keysOf(steps)); got != want {
			t.Errorf("suggest(%q) = %q, want %q", name, got, want)
		}
	}
	ad, err := Adapt([]byte(`{"steps":[{"path":"/wordpress/x"},{"step":"run","path":"/wordpress/y"}]}`), here)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ad.Source), `"cp"`) || strings.Contains(string(ad.Source), `"rm"`) || !strings.Contains(string(ad.Source), `"/wordpress/x"`) {
		t.Fatalf("guessed steps: %s", ad.Source)
	}
	if res := Check([]byte(`{"preferredVersions":{"php":"8.4","wp":"5.7"}}`), here); res.Valid || !has(res.Report, CodeWPVersionUnavailable, "preferredVersions", "WordPress 6.8") {
		t.Fatalf("mismatched pair: %+v", res.Report)
	}
	if ad, _ := Adapt([]byte(`{"preferredVersions":{"php":"8.4","wp":"5.7"}}`), here); !ad.Result.Valid || !strings.Contains(string(ad.Source), `"6.8"`) {
		t.Fatalf("pair adapted: %s %+v", ad.Source, ad.Result.Report)
	}
	only82 := Env{PHPVersions: []string{"8.2"}, WordPressVersions: []string{"6.1"}, WordPressOf: map[string]string{"8.2": "6.1"}}
	if res := Check([]byte(`{"preferredVersions":{"php":"7.3","wp":"latest"}}`), only82); res.Valid {
		t.Fatalf("7.3 without a 7.4 image: %+v", res.Report)
	}
	if ad, _ := Adapt([]byte(`{"preferredVersions":{"php":"7.3","wp":"latest"}}`), only82); !ad.Result.Valid || !strings.Contains(string(ad.Source), `"8.2"`) {
		t.Fatalf("7.3 adapted: %s", ad.Source)
	}
}

// TestLibraryEntryReplacesWordPressOrg: a wordpress.org plugin the
// workspace's Library has is installed from the Library, even where
// wordpress.org cannot be reached; adapt lists the change.
func TestLibraryEntryReplacesWordPressOrg(t *testing.T) {
	env := Env{Library: map[string]string{"plugin:woocommerce": "8.1.0"},
		Reach: func(string) error { return errors.New("not mirrored") }}
	src := []byte(`{"plugins":["woocommerce","friends"]}`)
	res := Check(src, env)
	var codes []string
	for _, f := range res.Report {
		codes = append(codes, f.Path+"="+f.Code)
	}
	if got := strings.Join(codes, ","); got != "plugins[0]=from_library,plugins[1]=resource_unreachable" {
		t.Fatalf("findings: %s", got)
	}
	ad, err := Adapt(src, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(ad.Changes) != 1 || ad.Changes[0].Code != CodeFromLibrary || ad.Changes[0].ReviewRequired ||
		!strings.Contains(ad.Changes[0].Message, "8.1.0") {
		t.Fatalf("changes: %+v", ad.Changes)
	}
}
