package scan

// ReadBounded exposes readBounded: a test hands it what the walk cannot be
// made to see deterministically (an entry swapped after the walk listed it).
var ReadBounded = readBounded
