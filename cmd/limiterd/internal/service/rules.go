package service

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/costwise/batcher/envoyrl"
)

// ruleWatcher reloads the Envoy rule directory when its files change,
// keeping the last good rules when a reload fails.
type ruleWatcher struct {
	dir     string
	read    func() ([]envoyrl.File, error) // the rule files of dir
	svc     *envoyrl.Service
	log     *slog.Logger
	metrics *metrics
	parse   envoyrl.ParseOptions
	use     func(rules *envoyrl.Rules, files int) // puts loaded rules in force
	last    [32]byte                              // digest of the files last loaded or refused
	readErr string                                // readFailure of the last read, "" after one that succeeded
}

// load reads and parses the directory; on success the service uses the new
// rules. It reports whether anything changed since the last load. A
// directory or file that cannot be read (gone, a dangling symlink, no
// permission) is a failed reload as bad rules are, counted and reported
// once until the error changes.
func (w *ruleWatcher) load() (changed bool, err error) {
	files, err := w.read()
	if err != nil {
		if readFailure(err) == w.readErr {
			return false, nil
		}
		w.readErr = readFailure(err)
		w.metrics.reloaded(false)
		return true, err
	}
	w.readErr = ""
	sum := digest(files)
	if sum == w.last {
		return false, nil
	}
	w.last = sum
	rules, err := envoyrl.ParseWith(files, w.parse)
	if err != nil {
		w.metrics.reloaded(false)
		return true, err
	}
	w.use(rules, len(files))
	return true, nil
}

// readFailure is what tells one read failure from another: a path and
// why it failed, whatever the call that found it (a directory removed
// while it is read fails a read of its entries, then an open).
func readFailure(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + pe.Err.Error()
	}
	return err.Error()
}

func digest(files []envoyrl.File) [32]byte {
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(filepath.Base(f.Name)))
		h.Write([]byte{0})
		h.Write(f.Content)
		h.Write([]byte{0})
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// run polls the directory every interval until ctx ends. Polling, rather
// than file notifications, also sees the symlink swaps that Kubernetes
// ConfigMap volumes make.
func (w *ruleWatcher) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := w.load()
		switch {
		case err != nil:
			w.log.Error("rule reload failed; keeping the last good rules", "dir", w.dir, "err", err.Error())
		case changed:
			w.log.Info("rules reloaded", "dir", w.dir, "domains", w.svc.Rules().Domains())
		}
	}
}

// dirExists reports whether dir is a directory.
func dirExists(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}

// files reads the rule files as envoyproxy/ratelimit's goruntime loader
// does: every file below dir(), in subdirectories too and whatever its
// name, dot files and directories included unless IgnoreDotFiles; with
// WatchRoot only those whose path below dir(), slashes made dots, starts
// with AppDirectory and a dot. Symbolic links are followed to files, not
// to directories (so a ConfigMap volume's ..data is not read twice);
// dir() itself may be a link. A file that cannot be read fails the load,
// which keeps the last good rules.
func (r *RuntimeRules) files() ([]envoyrl.File, error) {
	base := r.dir()
	top, err := filepath.EvalSymlinks(base)
	if err != nil {
		return nil, &envoyrl.ConfigError{File: base, Reason: err.Error()}
	}
	var files []envoyrl.File
	err = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if path != top && r.IgnoreDotFiles && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(top, path)
		if err != nil {
			return err
		}
		if r.WatchRoot && !strings.HasPrefix(strings.ReplaceAll(rel, string(filepath.Separator), "."), r.AppDirectory+".") {
			return nil
		}
		shown := filepath.Join(base, rel)
		if d.Type()&fs.ModeSymlink != 0 {
			st, err := os.Stat(path)
			if err != nil {
				return &envoyrl.ConfigError{File: shown, Reason: err.Error()}
			}
			if st.IsDir() {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return &envoyrl.ConfigError{File: shown, Reason: err.Error()}
		}
		files = append(files, envoyrl.File{Name: shown, Content: b})
		return nil
	})
	if err != nil {
		var ce *envoyrl.ConfigError
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, &envoyrl.ConfigError{File: base, Reason: err.Error()}
	}
	return files, nil
}
