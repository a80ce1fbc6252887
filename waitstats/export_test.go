package waitstats

import "time"

// SetNow sets the Recorder's clock.
func (r *Recorder) SetNow(now func() time.Time) { r.nowFunc = now }
