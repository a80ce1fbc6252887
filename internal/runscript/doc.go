// Package runscript tests `make run` from the outside, as a newcomer meets
// it: scripts/run.sh started like a terminal starts a foreground job (a
// process group of its own), stopped with the terminal's signals (Ctrl-C,
// a second Ctrl-C while stopping, the terminal closed), and the README's
// HTTP session pasted into a second shell against it. The tests check the
// database, the process table and the API's port afterwards, and each
// output the README documents. It has no code of its own: the script is
// scripts/run.sh, the session is README.md's.
package runscript
