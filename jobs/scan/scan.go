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
// and confinement starts there. That widens nothing, since a caller could
// name that directory directly; symlinks below the target are never
// followed.
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
}

const (
	defaultMaxFileSize = 1 << 20
	defaultMaxFiles    = 200_000
)

// ErrTarget is matched by errors about the target itself (missing, not a
// directory): retrying cannot fix them.
var ErrTarget = errors.New("invalid target")

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

	info, err := os.Stat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: target %q does not exist", ErrTarget, target)
	case err != nil:
		return nil, fmt.Errorf("%w: target %q: %w", ErrTarget, target, err)
	case !info.IsDir():
		return nil, fmt.Errorf("%w: target %q is not a directory", ErrTarget, target)
	}

	root, err := os.OpenRoot(target)
	if err != nil {
		return nil, fmt.Errorf("%w: open target %q: %w", ErrTarget, target, err)
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
