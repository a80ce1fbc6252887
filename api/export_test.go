package api

import "time"

// SetNowFunc replaces the clock of s's readyz migration cache; call it
// before s serves.
func SetNowFunc(s *Server, now func() time.Time) { s.ready.nowFunc = now }
