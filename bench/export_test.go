package bench

// Tiny makes o run every scenario at the tests' sizes.
func Tiny(o Options) Options {
	o.tiny = true
	return o
}
