package examples

import (
	"os"
	"testing"

	"github.com/costwise/batcher/envoyrl"
)

// checkRuleFile loads one rule file on its own, as limiterd and
// envoyproxy/ratelimit load it, and the whole directory beside it (a
// domain defined twice across files is refused only there).
func checkRuleFile(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	checkRules(t, file, string(b))
	rules, err := envoyrl.LoadDir("rules")
	if err != nil {
		t.Fatalf("rules/: %v", err)
	}
	if len(rules.Files()) == 0 {
		t.Fatal("rules/: no rule files loaded")
	}
}

// checkRules parses one rule file's content and checks that it defines a
// domain.
func checkRules(t *testing.T, name, content string) {
	t.Helper()
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: name, Content: []byte(content)}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(rules.Domains()) != 1 {
		t.Fatalf("%s: domains %v, want one", name, rules.Domains())
	}
}
