package scan_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobs/scan"
)

func TestWithin(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		target string
		roots  []string
		want   bool
	}{
		{name: "a root itself", target: "/srv/repos", roots: []string{"/srv/repos"}, want: true},
		{name: "below a root", target: "/srv/repos/a/b", roots: []string{"/srv/repos"}, want: true},
		{name: "below the second root", target: "/data/x", roots: []string{"/srv/repos", "/data"}, want: true},
		{name: "a sibling sharing the prefix", target: "/srv/reposX", roots: []string{"/srv/repos"}, want: false},
		{name: "below a sibling sharing the prefix", target: "/srv/repos-old/a", roots: []string{"/srv/repos"}, want: false},
		{name: "the root's parent", target: "/srv", roots: []string{"/srv/repos"}, want: false},
		{name: "dot-dot is cleaned first", target: "/srv/repos/../../etc", roots: []string{"/srv/repos"}, want: false},
		{name: "root / holds everything", target: "/etc/passwd", roots: []string{"/"}, want: true},
		{name: "root / holds itself", target: "/", roots: []string{"/"}, want: true},
		{name: "a root with a trailing slash", target: "/srv/repos/a", roots: []string{"/srv/repos/"}, want: true},
		{name: "relative target", target: "srv/repos/a", roots: []string{"/"}, want: false},
		{name: "no roots", target: "/srv/repos", roots: nil, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, scan.Within(tt.target, tt.roots))
		})
	}
}

// TestDirRoots builds a tree with a root, a checkout in it, a directory
// outside it and the ways out (a symlink, `..`, a sibling sharing the
// root's prefix), and checks what Dir with Options.Roots scans and refuses.
func TestDirRoots(t *testing.T) {
	t.Parallel()

	base, err := filepath.EvalSymlinks(t.TempDir()) // the messages quote resolved paths
	require.NoError(t, err)
	root := filepath.Join(base, "repos")
	inside := filepath.Join(root, "acme")
	outside := filepath.Join(base, "outside")
	sibling := filepath.Join(base, "reposX")
	for _, dir := range []string{inside, outside, sibling} {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a_test.go"),
			[]byte("package a\n\nimport \"testing\"\n\nfunc TestA(t *testing.T) {}\n"), 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "a-file"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "escape")))
	require.NoError(t, os.Symlink("../outside", filepath.Join(root, "escape-relative")))
	require.NoError(t, os.Symlink(root, filepath.Join(base, "repos-link")))
	require.NoError(t, os.Symlink(filepath.Join(root, "acme"), filepath.Join(outside, "into-root")))

	tests := []struct {
		name      string
		target    string
		roots     []string
		wantTests int
		wantErr   string // "" for a scan that works
		outside   bool   // the error is ErrOutsideRoots
	}{
		{name: "inside", target: inside, roots: []string{root}, wantTests: 1},
		{name: "the root itself", target: root, roots: []string{root}, wantTests: 1},
		{name: "inside the second root", target: outside, roots: []string{root, outside}, wantTests: 1},
		{name: "a symlink to the root as the root", target: inside, roots: []string{filepath.Join(base, "repos-link")}, wantTests: 1},
		{name: "through a symlink to the root", target: filepath.Join(base, "repos-link", "acme"), roots: []string{root}, wantTests: 1},
		{name: "a symlink outside leading into the root", target: filepath.Join(outside, "into-root"), roots: []string{root}, wantTests: 1},
		{name: "root / holds everything", target: outside, roots: []string{"/"}, wantTests: 1},

		{name: "outside", target: outside, roots: []string{root}, outside: true,
			wantErr: `invalid target: target "` + outside + `" is outside the analysis roots ` + root},
		{name: "a symlink in the root leading out", target: filepath.Join(root, "escape"), roots: []string{root}, outside: true,
			wantErr: `invalid target: target "` + root + `/escape" (it resolves to "` + outside + `") is outside the analysis roots ` + root},
		{name: "a relative symlink in the root leading out", target: filepath.Join(root, "escape-relative"), roots: []string{root}, outside: true,
			wantErr: `(it resolves to "` + outside + `") is outside the analysis roots`},
		{name: "dot-dot out of the root", target: root + "/../outside", roots: []string{root}, outside: true,
			wantErr: `invalid target: target "` + root + `/../outside" (it resolves to "` + outside + `") is outside the analysis roots ` + root},
		{name: "a sibling sharing the root's prefix", target: sibling, roots: []string{root}, outside: true,
			wantErr: `target "` + sibling + `" is outside the analysis roots`},
		{name: "every root listed", target: outside, roots: []string{root, sibling}, outside: true,
			wantErr: `is outside the analysis roots ` + root + `:` + sibling},
		{name: "a root that does not exist holds nothing", target: inside, roots: []string{filepath.Join(base, "gone")}, outside: true,
			wantErr: `is outside the analysis roots ` + base + `/gone`},

		{name: "missing inside: as without roots", target: filepath.Join(root, "gone"), roots: []string{root},
			wantErr: `invalid target: target "` + root + `/gone" does not exist`},
		{name: "missing outside: as without roots", target: "/no/such/dir", roots: []string{root},
			wantErr: `invalid target: target "/no/such/dir" does not exist`},
		{name: "a file", target: filepath.Join(root, "a-file"), roots: []string{root},
			wantErr: `invalid target: target "` + root + `/a-file" is not a directory`},
		{name: "relative", target: "repos/acme", roots: []string{"/"},
			wantErr: `invalid target: target "repos/acme" is not an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := scan.Dir(context.Background(), tt.target, scan.Options{Roots: tt.roots})
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tt.wantTests, res.Total())
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.ErrorIs(t, err, scan.ErrTarget, "cancelled, not retried")
			require.Equal(t, tt.outside, errors.Is(err, scan.ErrOutsideRoots))
		})
	}
}
