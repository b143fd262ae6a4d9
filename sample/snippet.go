package main

import (
	"embed"
	"fmt"
	"io"
	"strings"
)

// librarySource is the sample's own code that calls the library, read for
// the snippet the summary and the report show, so that what they show is
// what the replicas run.
//
//go:embed limiter.go library.go
var librarySource embed.FS

// snippetFiles are the files the snippet is read from, in the order the
// replicas run their code: the shared resource is made, then provisioned
// and started with the batcher, then fed.
var snippetFiles = []string{"limiter.go", "library.go"}

const (
	snippetBegin = "// shown in the report: begin"
	snippetEnd   = "// shown in the report: end"
)

// librarySnippet returns the library code each replica runs: the lines
// between the markers of snippetFiles, each region's indentation removed,
// comment lines left out, and the body of a block that only handles an
// error ("if err := ...; err != nil {") shown as "{ … }".
func librarySnippet() (string, error) {
	var out []string
	for _, name := range snippetFiles {
		src, err := librarySource.ReadFile(name)
		if err != nil {
			return "", err
		}
		lines, err := markedLines(string(src))
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, lines...)
	}
	if len(out) == 0 {
		return "", fmt.Errorf("no lines marked %q in %s", snippetBegin, strings.Join(snippetFiles, ", "))
	}
	return strings.Join(out, "\n"), nil
}

// markedLines returns the lines of the regions of src, as librarySnippet
// shows them.
func markedLines(src string) ([]string, error) {
	var out, region []string
	in := false
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == snippetBegin:
			if in {
				return nil, fmt.Errorf("%q inside a region", snippetBegin)
			}
			in, region = true, nil
		case trimmed == snippetEnd:
			if !in {
				return nil, fmt.Errorf("%q outside a region", snippetEnd)
			}
			in = false
			out = append(out, shown(region)...)
		case in:
			region = append(region, line)
		}
	}
	if in {
		return nil, fmt.Errorf("a region without %q", snippetEnd)
	}
	return out, nil
}

// shown turns the lines of one region into the lines shown: the region's
// common indentation removed (tabs as four spaces), comments left out, and
// the body of each error-handling block elided.
func shown(region []string) []string {
	indent := -1
	for _, l := range region {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	var out []string
	skipTo := "" // the closing line of an elided block
	for _, l := range region {
		switch {
		case skipTo != "":
			if l == skipTo {
				skipTo = ""
			}
			continue
		case strings.HasPrefix(strings.TrimSpace(l), "//") || strings.TrimSpace(l) == "":
			continue
		}
		body := l[min(indent, len(l)):]
		if strings.HasPrefix(strings.TrimSpace(l), "if err := ") && strings.HasSuffix(l, "err != nil {") {
			skipTo = l[:len(l)-len(strings.TrimLeft(l, "\t"))] + "}"
			body += " … }"
		}
		out = append(out, strings.ReplaceAll(body, "\t", "    "))
	}
	return out
}

// snippetCaption introduces the snippet in the summary and the report.
const snippetCaption = "The library code each replica runs (sample/limiter.go, then sample/library.go; " +
	"lim wraps the shared resource and takes the users' RU off its capacity):"

// printSnippet writes the snippet, indented, under its caption.
func printSnippet(w io.Writer) error {
	snippet, err := librarySnippet()
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\n"+snippetCaption)
	for _, line := range strings.Split(snippet, "\n") {
		fmt.Fprintln(w, "    "+line)
	}
	return nil
}
