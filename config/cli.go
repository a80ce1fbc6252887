package config

// CLI is the configuration of tierctl, the operator command line.
type CLI struct {
	Database
	Logging
}

func (c *CLI) validate(ch *checker) {
	c.Database.validate(ch)
	c.Logging.validate(ch)
}
