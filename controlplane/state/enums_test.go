package state

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestEnumSetsHoldEveryConstant parses this package: every string
// constant of a const block whose names start with one of the prefixes
// below is in that prefix's sets, so the API document's enums (taken from
// the sets) cannot miss a value the code stores.
func TestEnumSetsHoldEveryConstant(t *testing.T) {
	sets := map[string][][]string{
		"Plan":       {Plans},
		"Role":       {Roles},
		"Invitation": {InvitationStatuses},
		"Job":        {JobStatuses},
		"Site":       {SiteStatuses},
		"Node":       {NodeStatuses},
		"Template":   {TemplateStatuses},
		"Run":        {RunStatuses, RunModes},
		"Step":       {StepStatuses},
		"Import":     {ImportStatuses, ImportSourceKinds},
		"Domain":     {DomainStatuses},
		"Delivery":   {DeliveryStatuses},
		"Token":      {TokenKinds},
	}
	// Values stored but never shown.
	hidden := map[string]bool{"DeliveryQueued": true}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) || hidden[name.Name] {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					val, _ := strconv.Unquote(lit.Value)
					for prefix, ss := range sets {
						rest, ok := strings.CutPrefix(name.Name, prefix)
						if !ok || rest == "" || !isUpper(rest[0]) {
							continue
						}
						checked++
						if !slices.ContainsFunc(ss, func(s []string) bool { return slices.Contains(s, val) }) {
							t.Errorf("%s = %q is in none of the %s enum sets (enums.go)", name.Name, val, prefix)
						}
					}
				}
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d constants checked: the parse found too little", checked)
	}
}

func isUpper(b byte) bool { return b >= 'A' && b <= 'Z' }
