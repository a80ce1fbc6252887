package scan_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobs/scan"
)

// copyFixture copies testdata/fixture into a temporary directory so that a
// test can add what git cannot carry (symlinks, pipes, a .git directory).
func copyFixture(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS("testdata/fixture")))
	return dst
}

func names(res *scan.Result, framework scan.Framework) []string {
	var out []string
	for _, test := range res.Tests {
		if test.Framework == framework {
			out = append(out, test.Name)
		}
	}
	return out
}

func TestDirFixture(t *testing.T) {
	t.Parallel()

	dir := copyFixture(t)
	// Not valid Go; written here rather than committed, so gofmt stays quiet.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go", "pkg", "broken_test.go"),
		[]byte("package pkg\n\nfunc TestBroken(t *testing.T) {\n"), 0o600))

	res, err := scan.Dir(context.Background(), dir, scan.Options{})
	require.NoError(t, err)

	require.ElementsMatch(t, []string{
		"TestSelectQueue_UnknownTierGoesDefault", "TestParse", "Test", "Test_Underscore", "TestÜnicode", "TestAliased",
	}, names(res, scan.Go))
	require.ElementsMatch(t, []string{
		"test_add", "test_async_add", "test_parametrized",
		"TestCalc::test_mul", "TestCalc::test_async_method", "test_suffix_file",
	}, names(res, scan.Pytest))
	require.ElementsMatch(t, []string{
		"adds numbers", "subtracts numbers", "is skipped but is a test", "adds %i and %i", "template title",
		"renders", "focuses",
	}, names(res, scan.JS))

	require.Equal(t, 6, res.GoTests)
	require.Equal(t, 6, res.PythonTests)
	require.Equal(t, 7, res.JSTests)
	require.Equal(t, 19, res.Total())
	require.Equal(t, []string{"go/pkg/broken_test.go"}, res.Skipped)
	require.Empty(t, res.Commit)

	for _, test := range res.Tests {
		require.NotContains(t, test.File, "node_modules")
		require.NotContains(t, test.File, "vendor")
		require.Positive(t, test.Line)
	}
}

func TestDirLines(t *testing.T) {
	t.Parallel()

	res, err := scan.Dir(context.Background(), "testdata/fixture/web", scan.Options{})
	require.NoError(t, err)
	lines := map[string]int{}
	for _, test := range res.Tests {
		lines[test.File+":"+test.Name] = test.Line
	}
	require.Equal(t, 4, lines["src/app.test.js:adds numbers"])
	require.Equal(t, 9, lines["src/app.test.js:subtracts numbers"])
	require.Equal(t, 16, lines["src/app.test.js:template title"])
}

func TestDirBadTarget(t *testing.T) {
	t.Parallel()

	file := filepath.Join(t.TempDir(), "file.go")
	require.NoError(t, os.WriteFile(file, []byte("package x"), 0o600))

	tests := []struct {
		name   string
		target string
		want   string
	}{
		{name: "missing", target: "/does/not/exist", want: `target "/does/not/exist" does not exist`},
		{name: "file", target: file, want: "is not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := scan.Dir(context.Background(), tt.target, scan.Options{})
			require.ErrorIs(t, err, scan.ErrTarget)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestDirFollowsNoSymlinksAndSkipsSpecialFiles(t *testing.T) {
	t.Parallel()

	dir := copyFixture(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "outside_test.go"),
		[]byte("package x\nimport \"testing\"\nfunc TestOutside(t *testing.T) {}\n"), 0o600))

	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "escape")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "outside_test.go"), filepath.Join(dir, "linked_test.go")))
	require.NoError(t, os.Symlink("../../..", filepath.Join(dir, "go", "up")))
	// A named pipe would block a reader forever; it must not even be opened.
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pipe_test.go"), 0o600))

	res, err := scan.Dir(context.Background(), dir, scan.Options{})
	require.NoError(t, err)
	require.Equal(t, 19, res.Total())
	require.NotContains(t, names(res, scan.Go), "TestOutside")
}

func TestDirBoundsFileSize(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	small := "package x\nimport \"testing\"\nfunc TestSmall(t *testing.T) {}\n"
	big := small + "// " + strings.Repeat("x", 8192) + "\nfunc TestBig(t *testing.T) {}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "small_test.go"), []byte(small), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big_test.go"), []byte(strings.Replace(big, "TestSmall", "TestAlsoBig", 1)), 0o600))

	res, err := scan.Dir(context.Background(), dir, scan.Options{MaxFileSize: 4096})
	require.NoError(t, err)
	require.Equal(t, []string{"TestSmall"}, names(res, scan.Go))
	require.Equal(t, []string{"big_test.go"}, res.Skipped)
}

func TestDirBoundsFileCount(t *testing.T) {
	t.Parallel()

	_, err := scan.Dir(context.Background(), "testdata/fixture", scan.Options{MaxFiles: 5})
	require.ErrorIs(t, err, scan.ErrTooManyFiles)
}

func TestDirStopsOnCancel(t *testing.T) {
	t.Parallel()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := scan.Dir(ctx, "testdata/fixture", scan.Options{})
	require.ErrorIs(t, err, context.Canceled)
}

func TestDirGitCommit(t *testing.T) {
	t.Parallel()

	const sha = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{name: "loose ref", files: map[string]string{".git/HEAD": "ref: refs/heads/main\n", ".git/refs/heads/main": sha + "\n"}, want: sha},
		{name: "packed ref", files: map[string]string{".git/HEAD": "ref: refs/heads/main\n", ".git/packed-refs": "# pack-refs\n" + sha + " refs/heads/main\n"}, want: sha},
		{name: "detached", files: map[string]string{".git/HEAD": sha + "\n"}, want: sha},
		{name: "ref escaping .git", files: map[string]string{".git/HEAD": "ref: refs/../../secret\n"}, want: ""},
		{name: "garbage", files: map[string]string{".git/HEAD": "not a commit\n"}, want: ""},
		{name: "no checkout", files: map[string]string{"README": "x"}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, content := range tt.files {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700))
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
			}
			res, err := scan.Dir(context.Background(), dir, scan.Options{})
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Commit)
		})
	}
}

// mkfifo makes a named pipe at path. Its cleanup opens the pipe for writing
// (O_RDWR never blocks on Linux), which releases a reader stuck opening it,
// so a test that failed by hanging does not leak a blocked goroutine.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})
}

// within runs fn and fails t if it has not returned after d: a read that
// blocks (a FIFO) must fail fast instead. fn only stores its results; the
// test checks them after within returns.
func within(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still blocked after %s", d)
	}
}

const outsideTest = "package x\nimport \"testing\"\nfunc TestOutside(t *testing.T) {}\n"

// TestReadBoundedRefusesAllButRegularFilesInside hands readBounded the
// entries that the walk would skip, as if one had been swapped in after the
// walk saw a regular file there: nothing outside the target is read, no
// symlink is followed (not even to a file inside), and a FIFO neither
// blocks nor is read.
func TestReadBoundedRefusesAllButRegularFilesInside(t *testing.T) {
	t.Parallel()

	parent := t.TempDir()
	target, outside := filepath.Join(parent, "target"), filepath.Join(parent, "outside")
	require.NoError(t, os.Mkdir(target, 0o700))
	require.NoError(t, os.Mkdir(outside, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "x_test.go"), []byte(outsideTest), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(target, "regular_test.go"), []byte("package x\n"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(outside, "x_test.go"), filepath.Join(target, "abs_link_test.go")))
	require.NoError(t, os.Symlink("../outside/x_test.go", filepath.Join(target, "rel_link_test.go")))
	require.NoError(t, os.Symlink(outside, filepath.Join(target, "dir_link")))
	require.NoError(t, os.Symlink("regular_test.go", filepath.Join(target, "inside_link_test.go")))
	require.NoError(t, os.Mkdir(filepath.Join(target, "dir_test.go"), 0o700))
	mkfifo(t, filepath.Join(target, "fifo_test.go"))

	root, err := os.OpenRoot(target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = root.Close() })

	src, err := scan.ReadBounded(root, "regular_test.go", 1<<20)
	require.NoError(t, err)
	require.Equal(t, "package x\n", string(src))

	for _, name := range []string{
		"../outside/x_test.go",    // a .. component
		"abs_link_test.go",        // a symlink to a file outside, absolute
		"rel_link_test.go",        // a symlink to a file outside, through ..
		"dir_link/x_test.go",      // through a symlink to a directory outside
		"inside_link_test.go",     // a symlink, even to a file inside
		"dir_test.go",             // a directory
		"fifo_test.go",            // a FIFO: must neither block nor be read
		"missing_test.go",         // gone since the walk
		"regular_test.go/../x.go", // not a directory
	} {
		t.Run(name, func(t *testing.T) {
			var (
				src []byte
				err error
			)
			within(t, 5*time.Second, func() { src, err = scan.ReadBounded(root, name, 1<<20) })
			require.Error(t, err)
			require.NotContains(t, string(src), "TestOutside")
		})
	}
}

// TestDirOutsideLinksAndFIFO scans a target holding a symlink to a file
// x_test.go outside, a symlink to a directory outside holding one, a
// symlink out through .., and a FIFO named like a test file: the scan ends,
// finds only the inside test and reads nothing outside.
func TestDirOutsideLinksAndFIFO(t *testing.T) {
	t.Parallel()

	parent := t.TempDir()
	target, outside := filepath.Join(parent, "target"), filepath.Join(parent, "outside")
	require.NoError(t, os.MkdirAll(filepath.Join(target, "pkg"), 0o700))
	require.NoError(t, os.Mkdir(outside, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "x_test.go"), []byte(outsideTest), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(target, "pkg", "in_test.go"),
		[]byte("package pkg\nimport \"testing\"\nfunc TestInside(t *testing.T) {}\n"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(outside, "x_test.go"), filepath.Join(target, "x_test.go")))
	require.NoError(t, os.Symlink(outside, filepath.Join(target, "pkg", "outside")))
	require.NoError(t, os.Symlink("../../outside", filepath.Join(target, "pkg", "up")))
	mkfifo(t, filepath.Join(target, "a_test.go"))

	var (
		res *scan.Result
		err error
	)
	within(t, 10*time.Second, func() { res, err = scan.Dir(context.Background(), target, scan.Options{}) })
	require.NoError(t, err)
	require.Equal(t, []string{"TestInside"}, names(res, scan.Go))
	require.Equal(t, 1, res.TestFiles)
}

// TestDirTargetSymlinkToDirectory: a target that is a symlink to a
// directory is resolved, and that directory scanned (a caller could name it
// directly); symlinks inside it are still not followed.
func TestDirTargetSymlinkToDirectory(t *testing.T) {
	t.Parallel()

	parent := t.TempDir()
	real, outside := filepath.Join(parent, "real"), filepath.Join(parent, "outside")
	require.NoError(t, os.Mkdir(real, 0o700))
	require.NoError(t, os.Mkdir(outside, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "x_test.go"), []byte(outsideTest), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(real, "in_test.go"),
		[]byte("package x\nimport \"testing\"\nfunc TestInside(t *testing.T) {}\n"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(real, "outside")))
	link := filepath.Join(parent, "link")
	require.NoError(t, os.Symlink(real, link))

	res, err := scan.Dir(context.Background(), link, scan.Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"TestInside"}, names(res, scan.Go))
}

// TestDirGitFilesBounded: .git/HEAD is read like a test file, so a FIFO
// there cannot block the scan, and a symlink there (even to a file inside
// the target) is not followed.
func TestDirGitFilesBounded(t *testing.T) {
	t.Parallel()

	const sha = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name string
		make func(t *testing.T, dir string)
	}{
		{name: "HEAD is a FIFO", make: func(t *testing.T, dir string) {
			mkfifo(t, filepath.Join(dir, ".git", "HEAD"))
		}},
		{name: "HEAD links outside", make: func(t *testing.T, dir string) {
			outside := filepath.Join(t.TempDir(), "HEAD")
			require.NoError(t, os.WriteFile(outside, []byte(sha+"\n"), 0o600))
			require.NoError(t, os.Symlink(outside, filepath.Join(dir, ".git", "HEAD")))
		}},
		{name: "HEAD links inside", make: func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "commit"), []byte(sha+"\n"), 0o600))
			require.NoError(t, os.Symlink("../commit", filepath.Join(dir, ".git", "HEAD")))
		}},
		{name: "loose ref is a FIFO", make: func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o600))
			require.NoError(t, os.MkdirAll(filepath.Join(dir, ".git", "refs", "heads"), 0o700))
			mkfifo(t, filepath.Join(dir, ".git", "refs", "heads", "main"))
		}},
		{name: "HEAD too large", make: func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, ".git", "HEAD"), []byte(sha+strings.Repeat(" ", 8192)), 0o600))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(dir, ".git"), 0o700))
			tt.make(t, dir)
			var (
				res *scan.Result
				err error
			)
			within(t, 5*time.Second, func() { res, err = scan.Dir(context.Background(), dir, scan.Options{}) })
			require.NoError(t, err)
			require.Empty(t, res.Commit)
		})
	}
}
