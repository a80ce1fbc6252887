package config_test

import (
	"fmt"
	"path/filepath"

	"github.com/tierq/tierq/config"
)

// Dirs is an application's own configuration section: where a service's
// files are.
type Dirs struct {
	SourceDir string `env:"THUMBNAIL_SOURCE_DIR,required"`
	OutputDir string `env:"THUMBNAIL_OUTPUT_DIR" envDefault:"/var/lib/thumbnails"`
}

// Validate implements config.Section.
func (d *Dirs) Validate(c *config.Checker) {
	if !filepath.IsAbs(d.SourceDir) {
		c.Fail("SourceDir", "must be an absolute directory")
	}
	if !filepath.IsAbs(d.OutputDir) {
		c.Fail("OutputDir", "must be an absolute directory")
	}
}

// An application's own variables load with tierq's reporting: every bad
// variable named with its value, and config.Join lists them with the
// worker's own, so that one start reports everything and exits 2.
func ExampleLoadSection() {
	dirs, err := config.LoadSection[Dirs]([]string{"THUMBNAIL_SOURCE_DIR=/srv/images"})
	fmt.Println(dirs.SourceDir, dirs.OutputDir, err)

	environ := []string{"DATABASE_URL=postgres://db/app", "LOG_LEVEL=loud", "THUMBNAIL_SOURCE_DIR=images"}
	_, dirsErr := config.LoadSection[Dirs](environ)
	_, cliErr := config.Load[config.CLI](environ)
	fmt.Println(config.Join(cliErr, dirsErr))
	// Output:
	// /srv/images /var/lib/thumbnails <nil>
	// invalid configuration: LOG_LEVEL="loud": slog: level string "loud": unknown name; THUMBNAIL_SOURCE_DIR="images": must be an absolute directory
}
