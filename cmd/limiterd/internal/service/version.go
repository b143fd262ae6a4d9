package service

import (
	"runtime/debug"
	"strings"
)

// versionRequested reports whether args ask for --version (or -version)
// before the first argument that is not a flag. The flag is also declared
// in newFlagSet, so that --help lists it.
func versionRequested(args []string) bool {
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			return false
		}
		if a == "-version" || a == "--version" || a == "-version=true" || a == "--version=true" {
			return true
		}
	}
	return false
}

// Version describes the running binary from its build information: the
// module version, the VCS commit it was built from, and "modified" when
// the work tree had changes. A binary built without VCS information (go
// run, go test, -buildvcs=false) says "commit unknown".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "limiterd (no build information)"
	}
	return versionOf(bi)
}

// versionOf formats bi as Version does.
func versionOf(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	out := []string{"limiterd", v}
	rev, modified := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	out = append(out, "commit", rev)
	if modified {
		out = append(out, "modified")
	}
	if bi.GoVersion != "" {
		out = append(out, bi.GoVersion)
	}
	return strings.Join(out, " ")
}
