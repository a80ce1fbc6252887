package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Analysis is where analysis jobs may look. The API (cmd/api) checks a
// target against it lexically, since it cannot see the workers' file
// system; the analyzer workers check it again after resolving symlinks and
// `..` on their host; tierctl enqueue checks it as the API does.
type Analysis struct {
	// Roots are the directories an analysis target must be (or be below):
	// ANALYSIS_ROOTS, colon-separated absolute directories, e.g.
	// /srv/repos:/data/checkouts. Each is cleaned (/srv/repos/ is
	// /srv/repos); an empty list, an empty entry, a relative entry or one
	// with a . or .. component is refused. Default "/": every directory
	// the analyzer can read.
	Roots AnalysisRoots `env:"ANALYSIS_ROOTS" envDefault:"/"`
}

func (a *Analysis) validate(c *checker) {
	// caarlos0/env gives a variable that is set but empty its default; an
	// ANALYSIS_ROOTS that an unset shell variable emptied must not quietly
	// become "/".
	if value, ok := c.vars["ANALYSIS_ROOTS"]; ok && value == "" {
		c.fail("Roots", "must not be empty: %s", analysisRootsHelp)
	}
}

// AnalysisRoots are absolute, clean directories (ANALYSIS_ROOTS parsed).
type AnalysisRoots []string

const analysisRootsHelp = "colon-separated absolute directories, e.g. /srv/repos:/data/checkouts (/ allows every directory)"

// UnmarshalText parses a colon-separated list of absolute directories.
func (r *AnalysisRoots) UnmarshalText(text []byte) error {
	var roots AnalysisRoots
	for entry := range strings.SplitSeq(string(text), ":") {
		switch {
		case entry == "":
			return errors.New("has an empty entry: " + analysisRootsHelp)
		case !filepath.IsAbs(entry):
			return fmt.Errorf("%q is not an absolute directory: %s", entry, analysisRootsHelp)
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
