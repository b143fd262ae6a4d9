package batcher_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines is the length the root README stays under, so that it reads in minutes.
const readmeMaxLines = 250

// mdLink matches an inline Markdown link or image target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks resolves every relative link of every Markdown file in the repository: the file or
// folder it names must exist, and a #fragment must name a heading of the target document.
func TestDocsLinks(t *testing.T) {
	files := markdownFiles(t)
	if len(files) < 5 {
		t.Fatalf("found %d Markdown files, want the README, docs/ and the package documents", len(files))
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := headingAnchors(t, path)
		anchors[path] = a
		return a
	}
	checked := 0
	for _, f := range files {
		for _, l := range links(t, f) {
			target, frag, _ := strings.Cut(l.target, "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path := f
			if target != "" {
				path = filepath.Join(filepath.Dir(f), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %q: %v", f, l.line, l.target, err)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchorsOf(path)[frag] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", f, l.line, l.target, path, frag)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link checked")
	}
}

// TestReadmeLength keeps the root README short: details go to docs/.
func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n >= readmeMaxLines {
		t.Errorf("README.md has %d lines, want fewer than %d", n, readmeMaxLines)
	}
}

func TestHeadingAnchor(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Differences from go-batcher v1.8.0", "differences-from-go-batcher-v180"},
		{"Quick start: the batcher", "quick-start-the-batcher"},
		{"Actual costs: `SetActualCost`", "actual-costs-setactualcost"},
		{"Scale: 4 to 128 instances, 20 to 500 partitions", "scale-4-to-128-instances-20-to-500-partitions"},
		{"The same answers as envoyproxy/ratelimit", "the-same-answers-as-envoyproxyratelimit"},
		{"Azure: a blob per partition, or the lease table?", "azure-a-blob-per-partition-or-the-lease-table"},
	} {
		if got := anchor(c.heading); got != c.want {
			t.Errorf("anchor(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

type link struct {
	target string
	line   int
}

func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// links returns the link targets of a Markdown file outside code blocks and code spans.
func links(t *testing.T, path string) []link {
	t.Helper()
	var out []link
	eachLine(t, path, func(n int, line string) {
		for _, m := range mdLink.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			out = append(out, link{target: m[1], line: n})
		}
	})
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown file, with the
// -1, -2 suffixes of repeated headings.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	eachLine(t, path, func(_ int, line string) {
		if !strings.HasPrefix(line, "#") {
			return
		}
		text := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(text, " ") {
			return
		}
		a := anchor(text)
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	})
	return out
}

// eachLine calls fn with every line of a file that is not inside a fenced code block.
func eachLine(t *testing.T, path string, fn func(n int, line string)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fenced := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			fn(n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// anchor is GitHub's anchor for a heading: lower case, spaces to hyphens, and every character
// that is not a letter, digit, hyphen or underscore dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func stripCodeSpans(line string) string {
	var b strings.Builder
	in := false
	for _, r := range line {
		if r == '`' {
			in = !in
			continue
		}
		if !in {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
