package examples

import (
	"bytes"
	"os"
	"path"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// compose is the part of the Compose specification the example uses;
// decoding with KnownFields refuses any other key, so the example stays
// within what this test checks.
type compose struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image     string   `yaml:"image"`
	Command   []string `yaml:"command"`
	Volumes   []string `yaml:"volumes"`
	Ports     []string `yaml:"ports"`
	DependsOn []string `yaml:"depends_on"`
	Profiles  []string `yaml:"profiles"`
	Restart   string   `yaml:"restart"`
}

func decodeStrict(t *testing.T, file string, b []byte, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// checkCompose decodes the Compose file strictly, and checks that every
// file it mounts exists, that limiterd's --config is a file it mounts, and
// that every service it depends on is defined.
func checkCompose(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	decodeStrict(t, file, b, &c)
	if _, ok := c.Services["limiterd"]; !ok {
		t.Fatalf("%s: no limiterd service", file)
	}
	if _, ok := c.Services["redis"]; !ok {
		t.Fatalf("%s: no redis service", file)
	}
	for name, s := range c.Services {
		if s.Image == "" {
			t.Errorf("%s: service %s has no image", file, name)
		}
		mounts := map[string]bool{}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Errorf("%s: service %s: volume %q is not SOURCE:TARGET", file, name, v)
				continue
			}
			if _, err := os.Stat(path.Join(path.Dir(file), parts[0])); err != nil {
				t.Errorf("%s: service %s mounts %s: %v", file, name, parts[0], err)
			}
			mounts[parts[1]] = true
		}
		for _, arg := range s.Command {
			if cfg, ok := strings.CutPrefix(arg, "--config="); ok && !mounts[cfg] {
				t.Errorf("%s: service %s reads %s, which it does not mount", file, name, cfg)
			}
		}
		for _, d := range s.DependsOn {
			if _, ok := c.Services[d]; !ok {
				t.Errorf("%s: service %s depends on %s, which is not defined", file, name, d)
			}
		}
	}
}
