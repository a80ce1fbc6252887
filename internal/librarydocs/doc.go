// Package librarydocs holds the check that docs/library.md shows the code
// of examples/invoices, the team's service that `make test` runs end to
// end as a module outside tierq's: every Go block of the page marked
// `<!-- file: PATH -->` is the file PATH, whole, and every one marked
// `<!-- from: PATH -->` stands in PATH as written. Change the example and
// the page together.
package librarydocs
