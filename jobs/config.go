package jobs

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// AnalysisRoots are absolute, clean directories (ANALYSIS_ROOTS parsed).
type AnalysisRoots []string

// AnalysisRootsHelp says what ANALYSIS_ROOTS holds.
const AnalysisRootsHelp = "colon-separated absolute directories, e.g. /srv/repos:/data/checkouts (/ allows every directory)"

// UnmarshalText parses a colon-separated list of absolute directories.
func (r *AnalysisRoots) UnmarshalText(text []byte) error {
	var roots AnalysisRoots
	for entry := range strings.SplitSeq(string(text), ":") {
		switch {
		case entry == "":
			return errors.New("has an empty entry: " + AnalysisRootsHelp)
		case !filepath.IsAbs(entry):
			return fmt.Errorf("%q is not an absolute directory: %s", entry, AnalysisRootsHelp)
		case slices.Contains(strings.Split(entry, "/"), "..") || slices.Contains(strings.Split(entry, "/"), "."):
			return fmt.Errorf("%q has a . or .. component: name the directory itself", entry)
		}
		roots = append(roots, filepath.Clean(entry))
	}
	*r = roots
	return nil
}

// String is the roots as ANALYSIS_ROOTS lists them.
func (r AnalysisRoots) String() string { return strings.Join(r, ":") }
