package examples

import (
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// check checks one file, given as a path relative to examples/ with
// forward slashes.
type check func(t *testing.T, file string)

// checks says which check each file under examples/ gets, by pattern
// (path.Match against the relative path); the first match wins.
var checks = []struct {
	pattern string
	check   check
}{
	{"limiterd.yaml", checkLimiterdConfigFile},
	{"rules/*.yaml", checkRuleFile},
	{"envoy/*.yaml", checkEnvoyBootstrap},
	{"docker-compose.yaml", checkCompose},
	{"k8s/kustomization.yaml", checkKustomization},
	{"k8s/*.yaml", checkManifests},
	{"swap/deployment.yaml", checkSwapDeployment},
	{"swap/configmap.yaml", checkSwapConfigMap},
	{"prometheus/*_test.yaml", checkPromRuleTests},
	{"prometheus/*.yaml", checkPromRules},
	{"grafana/*.json", checkDashboard},
	// This module's own sources: the compiler and go vet check them.
	{"*.go", nil},
	{"*/*.go", nil},
	{"*/*/*.go", nil},
	{"go.mod", nil},
	{"go.sum", nil},
}

// TestExampleFiles runs every file under examples/ through its check, and
// fails for a file that no check covers: a new example file needs a check.
func TestExampleFiles(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d files under examples/: %v", len(files), files)
	}
	for _, f := range files {
		c, ok := checkFor(f)
		switch {
		case !ok:
			t.Errorf("%s: no test checks this file; add a check to the table in files_test.go", f)
		case c != nil:
			t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) { c(t, f) })
		}
	}
}

func checkFor(file string) (check, bool) {
	for _, c := range checks {
		if ok, _ := path.Match(c.pattern, file); ok {
			return c.check, true
		}
	}
	return nil, false
}

// TestCheckForCoversKinds checks the table's matching: a file of an
// unknown kind, or in an unknown place, matches nothing.
func TestCheckForCoversKinds(t *testing.T) {
	for _, f := range []string{"notes.txt", "k8s/extra/deployment.yaml", "README.md", "limiterd.yml"} {
		if _, ok := checkFor(f); ok {
			t.Errorf("checkFor(%q) matched; want no check", f)
		}
	}
	for _, f := range []string{"k8s/deployment.yaml", "rules/edge.yaml", "prometheus/limiterd-rules_test.yaml"} {
		if c, ok := checkFor(f); !ok || c == nil {
			t.Errorf("checkFor(%q) found no check", f)
		}
	}
}
