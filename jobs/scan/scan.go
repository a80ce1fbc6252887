// Package scan walks a directory and finds the test cases in it: Go tests,
// pytest tests and JavaScript/TypeScript `it`/`test` calls. It is the work of
// the Analyzer service, kept free of River and the database so that it can be
// tested on fixture trees.
//
// The walk is confined to the target: it opens files through an os.Root, so
// no path (`..`, a symlink) leads out of it; it follows no symlinks at all; it
// skips `.git`, `node_modules` and `vendor` directories, files that are not
// regular, and files over a size limit. A file is checked again when it is
// opened (it may have been swapped since the walk listed it): it is opened
// with O_NONBLOCK and read only if it is still the same regular file, so a
// FIFO put in its place cannot block a worker.
//
// The target itself is resolved like any path: when it is a symlink to a
// directory (or passes through one), the directory it leads to is scanned
// and confinement starts there. Without Options.Roots that widens nothing,
// since a caller could name that directory directly; symlinks below the
// target are never followed.
//
// Options.Roots confines the target itself (ANALYSIS_ROOTS): the target
// and each root are resolved (filepath.EvalSymlinks: symlinks and `..`),
// and the resolved target must be a resolved root or below one, or Dir
// fails with ErrOutsideRoots. The target is then opened through that root's
// own os.Root, so a directory swapped for a symlink after the check cannot
// lead out of the root either. Within is the lexical form of the same rule,
// for callers that cannot see the file system (the API).
package scan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Framework names the test framework a test belongs to.
type Framework string

const (
	Go     Framework = "go"
	Pytest Framework = "pytest"
	JS     Framework = "js"
)

// Test is one test case found.
type Test struct {
	// File is the path of the file, relative to the target, with slashes.
	File string `json:"file"`
	// Name is the test's name: the Go function, the pytest function (with its
	// class as `TestClass::test_name`), or the JS test's title.
	Name string `json:"name"`
	// Framework is go, pytest or js.
	Framework Framework `json:"framework"`
	// Line is the 1-based line the test starts on.
	Line int `json:"line"`
}

// Result is what a scan found.
type Result struct {
	// Tests in file order, then line order.
	Tests []Test
	// Counts per framework.
	GoTests, PythonTests, JSTests int
	// TestFiles is the number of test files read.
	TestFiles int
	// Skipped lists test files not read or not understood (too large,
	// unreadable, not valid Go), relative to the target.
	Skipped []string
	// Commit is the git commit checked out in the target, when the target is
	// the top of a git checkout; empty otherwise.
	Commit string
}

// Total is the number of tests found.
func (r *Result) Total() int { return len(r.Tests) }

// Options bound a scan.
type Options struct {
	// MaxFileSize is the largest test file read, in bytes; larger files are
	// skipped. Default 1 MiB.
	MaxFileSize int64
	// MaxFiles is the most directory entries visited before the scan stops
	// with an error. Default 200,000.
	MaxFiles int
	// Roots, when not empty, are the absolute directories the target must
	// be in once resolved (see the package documentation); a relative
	// target is then refused too. Empty (the default): any directory.
	Roots []string
}

const (
	defaultMaxFileSize = 1 << 20
	defaultMaxFiles    = 200_000
)

// ErrTarget is matched by errors about the target itself (missing, not a
// directory): retrying cannot fix them.
var ErrTarget = errors.New("invalid target")

// ErrOutsideRoots is matched by the error about a target that resolves to a
// directory outside Options.Roots; that error matches ErrTarget too.
var ErrOutsideRoots = errors.New("outside the analysis roots")

// ErrTooManyFiles is returned when a target holds more entries than
// Options.MaxFiles.
var ErrTooManyFiles = errors.New("too many files")

// skipDirs are directories never entered, at any depth.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "vendor": true}

// Dir scans the directory target.
func Dir(ctx context.Context, target string, opts Options) (*Result, error) {
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = defaultMaxFileSize
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = defaultMaxFiles
	}

	root, err := openTarget(target, opts.Roots)
	if err != nil {
		return nil, err
	}
	defer root.Close()

	res := &Result{}
	var visited int
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if visited++; visited > opts.MaxFiles {
			return fmt.Errorf("%w: more than %d entries under %q", ErrTooManyFiles, opts.MaxFiles, target)
		}
		if err != nil {
			if name == "." {
				return fmt.Errorf("%w: read target %q: %w", ErrTarget, target, err)
			}
			res.Skipped = append(res.Skipped, name) // an unreadable directory
			return fs.SkipDir
		}
		if d.IsDir() {
			if name != "." && skipDirs[d.Name()] {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() { // symlinks, sockets, pipes, devices
			return nil
		}
		framework, ok := frameworkOf(d.Name())
		if !ok {
			return nil
		}
		src, err := readBounded(root, name, opts.MaxFileSize)
		if err != nil {
			res.Skipped = append(res.Skipped, name)
			return nil //nolint:nilerr // a file we cannot read is reported, not fatal
		}
		res.TestFiles++
		tests, err := parse(framework, name, src)
		if err != nil {
			res.Skipped = append(res.Skipped, name)
			return nil //nolint:nilerr // a file we cannot parse is reported, not fatal
		}
		res.Tests = append(res.Tests, tests...)
		return nil
	})
	if err != nil {
		return nil, err
	}

	for _, t := range res.Tests {
		switch t.Framework {
		case Go:
			res.GoTests++
		case Pytest:
			res.PythonTests++
		case JS:
			res.JSTests++
		}
	}
	res.Commit = gitCommit(root, opts.MaxFileSize)
	return res, nil
}

// openTarget opens the directory target, confined to roots when there are
// any. Its errors match ErrTarget.
func openTarget(target string, roots []string) (*os.Root, error) {
	if len(roots) == 0 {
		info, err := os.Stat(target)
		if err := checkDir(target, info, err); err != nil {
			return nil, err
		}
		root, err := os.OpenRoot(target)
		if err != nil {
			return nil, fmt.Errorf("%w: open target %q: %w", ErrTarget, target, err)
		}
		return root, nil
	}

	if !filepath.IsAbs(target) {
		return nil, fmt.Errorf("%w: target %q is not an absolute path", ErrTarget, target)
	}
	resolved, err := filepath.EvalSymlinks(target)
	if err != nil {
		return nil, checkDir(target, nil, err) // missing: as without roots
	}
	for _, r := range roots {
		resolvedRoot, err := filepath.EvalSymlinks(r)
		if err != nil {
			continue // a root that does not exist holds nothing
		}
		if rel, ok := relative(resolvedRoot, resolved); ok {
			return openBelow(target, resolvedRoot, rel)
		}
	}
	via := ""
	if resolved != target {
		via = fmt.Sprintf(" (it resolves to %q)", resolved)
	}
	return nil, fmt.Errorf("%w: target %q%s is %w %s", ErrTarget, target, via, ErrOutsideRoots, strings.Join(roots, ":"))
}

// openBelow opens target, which resolved to rel below the resolved root
// dir, through dir's os.Root: a directory swapped for a symlink since the
// target was resolved cannot lead out of dir.
func openBelow(target, dir, rel string) (*os.Root, error) {
	parent, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: open analysis root %q: %w", ErrTarget, dir, err)
	}
	defer parent.Close()
	info, err := parent.Stat(rel)
	if err := checkDir(target, info, err); err != nil {
		return nil, err
	}
	root, err := parent.OpenRoot(rel)
	if err != nil {
		return nil, fmt.Errorf("%w: open target %q: %w", ErrTarget, target, err)
	}
	return root, nil
}

// checkDir turns the result of a stat of target into Dir's error: none for
// a directory.
func checkDir(target string, info fs.FileInfo, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: target %q does not exist", ErrTarget, target)
	case err != nil:
		return fmt.Errorf("%w: target %q: %w", ErrTarget, target, err)
	case !info.IsDir():
		return fmt.Errorf("%w: target %q is not a directory", ErrTarget, target)
	}
	return nil
}

// Within reports whether target is one of roots or below one, comparing the
// cleaned paths as strings, without looking at the file system: /srv/repos
// holds /srv/repos and /srv/repos/a but not /srv/reposX; / holds every
// absolute path. Relative paths are in no root.
func Within(target string, roots []string) bool {
	if !path.IsAbs(target) {
		return false
	}
	target = path.Clean(target)
	for _, root := range roots {
		if _, ok := relative(path.Clean(root), target); ok {
			return true
		}
	}
	return false
}

// relative is p relative to dir ("." for dir itself), for clean absolute
// paths; ok is false when p is not dir or below it.
func relative(dir, p string) (string, bool) {
	switch {
	case p == dir:
		return ".", true
	case dir == "/":
		return p[1:], strings.HasPrefix(p, "/")
	case strings.HasPrefix(p, dir+"/"):
		return p[len(dir)+1:], true
	}
	return "", false
}

var (
	errTooLarge   = errors.New("file too large")
	errNotRegular = errors.New("not a regular file")
)

// readBounded reads the regular file name under root, refusing anything
// larger than limit bytes. It trusts nothing the walk saw: the entry may
// have been swapped since (for a FIFO, a device, or a symlink). So it
// lstats name and refuses anything but a regular file, opens it with
// O_NONBLOCK (opening a FIFO then returns at once instead of waiting for a
// writer forever), and refuses the open file unless it is a regular file
// and the very file lstat saw. A symlink is never followed, not even to a
// file inside root (os.Root would follow that one).
func readBounded(root *os.Root, name string, limit int64) ([]byte, error) {
	seen, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !seen.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", name, errNotRegular)
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !opened.Mode().IsRegular() || !os.SameFile(seen, opened) {
		return nil, fmt.Errorf("%s: %w", name, errNotRegular)
	}
	src, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(src)) > limit {
		return nil, errTooLarge
	}
	return src, nil
}

var jsExtensions = []string{".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts"}

// frameworkOf says which framework's test file base is, if any.
func frameworkOf(base string) (Framework, bool) {
	switch {
	case strings.HasSuffix(base, "_test.go"):
		return Go, true
	case strings.HasSuffix(base, ".py") && (strings.HasPrefix(base, "test_") || strings.HasSuffix(base, "_test.py")):
		return Pytest, true
	case slices.Contains(jsExtensions, path.Ext(base)) &&
		(strings.Contains(base, ".test.") || strings.Contains(base, ".spec.")):
		return JS, true
	}
	return "", false
}

func parse(framework Framework, name string, src []byte) ([]Test, error) {
	switch framework {
	case Go:
		return parseGo(name, src)
	case Pytest:
		return parsePython(name, src), nil
	case JS:
		return parseJS(name, src), nil
	}
	return nil, fmt.Errorf("unknown framework %q", framework)
}

// maxRefSize bounds .git/HEAD and a loose ref: both hold one line.
const maxRefSize = 4096

// gitCommit reads the commit checked out at the top of root, without running
// git and without leaving root. Its files are read as the test files are
// (readBounded: regular files only, no symlinks, bounded; packed-refs by
// packedLimit), so a .git/HEAD that is a FIFO or a huge file cannot hang or
// swell a worker. It returns "" when there is no checkout or HEAD cannot be
// resolved.
func gitCommit(root *os.Root, packedLimit int64) string {
	head, err := readBounded(root, ".git/HEAD", maxRefSize)
	if err != nil {
		return ""
	}
	ref, isRef := strings.CutPrefix(strings.TrimSpace(string(head)), "ref: ")
	if !isRef {
		return validCommit(ref)
	}
	if !strings.HasPrefix(ref, "refs/") || strings.Contains(ref, "..") {
		return ""
	}
	if loose, err := readBounded(root, ".git/"+ref, maxRefSize); err == nil {
		return validCommit(strings.TrimSpace(string(loose)))
	}
	packed, err := readBounded(root, ".git/packed-refs", packedLimit)
	if err != nil {
		return ""
	}
	for line := range bytes.Lines(packed) {
		sha, name, ok := strings.Cut(strings.TrimSpace(string(line)), " ")
		if ok && name == ref {
			return validCommit(sha)
		}
	}
	return ""
}

func validCommit(s string) string {
	if len(s) != 40 && len(s) != 64 {
		return ""
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return ""
		}
	}
	return s
}
