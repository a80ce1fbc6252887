package scan_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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
