package config_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
)

// mailer is an application's own section, as a team would write one.
type mailer struct {
	From     string        `env:"MAILER_FROM,required"`
	Timeout  time.Duration `env:"MAILER_TIMEOUT" envDefault:"5s"`
	Password string        `env:"MAILER_PASSWORD" secret:"token"`
	Digest   string        `env:"MAILER_DIGEST_CRON" envDefault:"0 8 * * *"`
	TZ       string        `env:"CRON_TZ" envDefault:"UTC"`
}

func (m *mailer) Validate(c *config.Checker) {
	if value, ok := c.Value("From"); ok && value == "" {
		c.Fail("From", "must not be empty")
	}
	if m.Password != "" && len(m.Password) < 8 {
		c.Fail("Password", "must be at least 8 characters")
	}
	c.TimeZone("TZ", m.TZ)
	c.Cron("Digest", m.Digest, m.TZ)
}

func TestLoadSection(t *testing.T) {
	t.Parallel()

	m, err := config.LoadSection[mailer]([]string{"MAILER_FROM=ops@example.com"})
	require.NoError(t, err)
	require.Equal(t, mailer{From: "ops@example.com", Timeout: 5 * time.Second, Digest: "0 8 * * *", TZ: "UTC"}, m)

	// Every bad variable at once, named with its value (secrets redacted),
	// in field order: parse errors first, then Validate's.
	_, err = config.LoadSection[mailer]([]string{"MAILER_TIMEOUT=soon"})
	require.ErrorIs(t, err, config.ErrInvalid)
	require.EqualError(t, err, `invalid configuration: MAILER_FROM="": required and not set; MAILER_TIMEOUT="soon": not a duration (examples: 250ms, 30s, 5m, 1h)`)

	_, err = config.LoadSection[mailer]([]string{"MAILER_FROM=", "MAILER_PASSWORD=short", "MAILER_DIGEST_CRON=at eight"})
	require.EqualError(t, err, `invalid configuration: MAILER_FROM="": must not be empty; MAILER_PASSWORD="[redacted]": must be at least 8 characters; `+
		`MAILER_DIGEST_CRON="at eight": not a cron expression (expected exactly 5 fields, found 2: [at eight]); examples: "0 */6 * * *", "30 3 * * *", "@every 1h"`)

	// A bad time zone is the time zone's error, not the expression's.
	_, err = config.LoadSection[mailer]([]string{"MAILER_FROM=ops@example.com", "CRON_TZ=Mars/Olympus"})
	require.EqualError(t, err, `invalid configuration: CRON_TZ="Mars/Olympus": not a time zone name (examples: UTC, Europe/Berlin)`)
}

func TestJoin(t *testing.T) {
	t.Parallel()

	require.NoError(t, config.Join(nil, nil))

	// Both read CRON_TZ: the joined error names it once.
	environ := []string{"DATABASE_URL=postgres://127.0.0.1/x", "CRON_TZ=Mars/Olympus", "SWEEP_BATCH=0", "MAILER_FROM=ops@example.com", "MAILER_PASSWORD=short"}
	_, schedulerErr := config.Load[config.Scheduler](environ)
	_, mailerErr := config.LoadSection[mailer](environ)
	joined := config.Join(schedulerErr, nil, mailerErr)
	require.ErrorIs(t, joined, config.ErrInvalid)
	require.EqualError(t, joined, `invalid configuration: CRON_TZ="Mars/Olympus": not a time zone name (examples: UTC, Europe/Berlin); `+
		`SWEEP_BATCH="0": must be between 1 and 100000; MAILER_PASSWORD="[redacted]": must be at least 8 characters`)

	// An error that is not configuration is kept, and still matched.
	other := errors.New("registry: two services named mailer")
	joined = config.Join(other, mailerErr)
	require.ErrorIs(t, joined, other)
	require.ErrorIs(t, joined, config.ErrInvalid)
}
