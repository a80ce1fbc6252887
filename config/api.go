package config

import (
	"log/slog"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/service"
)

// MinTokenLen is the shortest API token accepted.
const MinTokenLen = api.MinTokenLen

// API is the configuration of the HTTP API (cmd/api): tier-aware enqueue for
// producers and the operations endpoints for operators.
type API struct {
	Database
	Logging

	// Addr is where the API listens. Default 127.0.0.1:8081 (loopback only;
	// compose binds all interfaces).
	Addr string `env:"API_ADDR" envDefault:"127.0.0.1:8081"`
	// Token authorises producers (POST /v1/jobs, GET /v1/jobs/{id}).
	// Required: there is no open-by-default API.
	Token string `env:"API_TOKEN,required,notEmpty" secret:"token"`
	// AdminToken authorises operators: everything, including escalation,
	// queue stats and dead letters. Required, and different from Token.
	AdminToken string `env:"API_ADMIN_TOKEN,required,notEmpty" secret:"token"`

	// MaxAttempts is how many times a job the API inserts is tried before
	// River discards it (and the drain makes it a dead letter), for a kind
	// that declares none of its own (service.MaxAttempts). Default 10,
	// producer.DefaultMaxAttempts.
	MaxAttempts int `env:"MAX_ATTEMPTS" envDefault:"10"`
}

// Config is the api.Config of this environment, for api.Run: the API of
// registry's services logging to logger, with api.Config's defaults for
// what no variable sets (RequestTimeout). Set NewServices (services built
// on the pool) and LogAttrs on the result as needed.
func (a *API) Config(registry *service.Registry, logger *slog.Logger) (api.Config, error) {
	poolConfig, err := a.PoolConfig()
	if err != nil {
		return api.Config{}, err
	}
	return api.Config{
		Token:       a.Token,
		AdminToken:  a.AdminToken,
		Schema:      a.Schema,
		MaxAttempts: a.MaxAttempts,
		Registry:    registry,
		Addr:        a.Addr,
		PoolConfig:  poolConfig,
		Logger:      logger,
	}.WithDefaults(), nil
}

func (a *API) validate(c *checker) {
	a.Database.validate(c)
	a.Logging.validate(c)
	c.listenAddr("Addr", a.Addr)
	if len(a.Token) < MinTokenLen {
		c.fail("Token", "must be at least %d characters (e.g. openssl rand -hex 32)", MinTokenLen)
	}
	if len(a.AdminToken) < MinTokenLen {
		c.fail("AdminToken", "must be at least %d characters (e.g. openssl rand -hex 32)", MinTokenLen)
	} else if a.AdminToken == a.Token {
		c.fail("AdminToken", "must differ from API_TOKEN")
	}
	c.intRange("MaxAttempts", a.MaxAttempts, 1, 1000)
}
