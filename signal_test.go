package batcher

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// TestPollMatchesWait checks that poll, the select the test harness drives
// the loop with, has the cases of wait, the select of run, in the same
// order and with the same results: a signal added to run's select only
// would go untested by every harness test.
func TestPollMatchesWait(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "signal.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || (fn.Name.Name != "wait" && fn.Name.Name != "poll") {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			cc, ok := n.(*ast.CommClause)
			if !ok || cc.Comm == nil { // default
				return true
			}
			var sb strings.Builder
			printer.Fprint(&sb, fset, cc.Comm)
			if r, ok := cc.Body[len(cc.Body)-1].(*ast.ReturnStmt); ok && len(r.Results) > 0 {
				sb.WriteString(" -> ")
				printer.Fprint(&sb, fset, r.Results[0])
			}
			cases[fn.Name.Name] = append(cases[fn.Name.Name], sb.String())
			return true
		})
	}
	wait, poll := cases["wait"], cases["poll"]
	if len(wait) == 0 {
		t.Fatal("no select cases found in wait")
	}
	if !slices.Equal(wait, poll) {
		t.Fatalf("poll's cases differ from wait's:\nwait: %q\npoll: %q", wait, poll)
	}
	if n := len(wait); n != int(signalDue)+1 {
		t.Fatalf("wait has %d cases for %d signals", n, signalDue+1)
	}
}
