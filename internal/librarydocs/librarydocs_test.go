package librarydocs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// markedBlock is a marker and the Go code block right after it.
var markedBlock = regexp.MustCompile("(?s)<!-- (file|from): (\\S+) -->\n```go\n(.*?)```\n")

// TestLibraryShowsTheExample: docs/library.md's marked code blocks are
// examples/invoices' code, the service's and each of its four mains'.
func TestLibraryShowsTheExample(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "library.md"))
	require.NoError(t, err)

	var marked []string
	for _, m := range markedBlock.FindAllStringSubmatch(string(doc), -1) {
		how, path, block := m[1], m[2], m[3]
		marked = append(marked, how+" "+path)
		code, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		require.NoError(t, err)
		if how == "file" {
			require.Equal(t, string(code), block, "docs/library.md's block of %s is not the file", path)
		} else {
			require.Contains(t, string(code), block, "docs/library.md's block from %s is not in the file", path)
		}
	}
	require.Equal(t, []string{
		"from examples/invoices/invoices.go",
		"from examples/invoices/invoices.go",
		"from examples/invoices/invoices.go",
		"file examples/invoices/cmd/invoices-worker/main.go",
		"from examples/invoices/cmd/invoices-scheduler/main.go",
		"from examples/invoices/cmd/invoices-api/main.go",
		"file examples/invoices/cmd/invoicesctl/main.go",
	}, marked)
}
