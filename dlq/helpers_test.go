package dlq_test

import (
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/riverqueue/river/rivertype"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// flakyArgs are a test job kind whose worker each test defines.
type flakyArgs struct {
	N int `json:"n"`
}

func (flakyArgs) Kind() string { return "flaky" }

var errFlaky = errors.New("flaky: upstream unavailable")

// immediateRetry retries at once, so that a test runs through every attempt
// in milliseconds instead of River's attempt^4 seconds.
type immediateRetry struct{}

func (immediateRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }
