package bench

// Tiny makes o run every scenario at the tests' sizes, in schemas named
// <schemaPrefix>_<random>, so that a test can find its own schemas among
// those of other tests running against the same database.
func Tiny(o Options, schemaPrefix string) Options {
	o.tiny = true
	o.schemaPrefix = schemaPrefix
	return o
}
