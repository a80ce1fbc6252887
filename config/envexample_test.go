package config_test

import (
	"bufio"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/config"
	"github.com/tierq/tierq/jobs/jobsconfig"
	"github.com/tierq/tierq/routing"
	"github.com/tierq/tierq/tiers"
)

// envVars lists the variables of a configuration struct with their defaults.
func envVars(t reflect.Type) map[string]string {
	vars := map[string]string{}
	for sf := range t.Fields() {
		if sf.Anonymous {
			for k, v := range envVars(sf.Type) {
				vars[k] = v
			}
			continue
		}
		if key, _, _ := strings.Cut(sf.Tag.Get("env"), ","); key != "" {
			vars[key] = sf.Tag.Get("envDefault")
		}
	}
	return vars
}

// TestEnvExampleListsEveryVariable keeps .env.example honest: every variable
// of every process is there, with its real default and a line of why above.
func TestEnvExampleListsEveryVariable(t *testing.T) {
	t.Parallel()

	f, err := os.Open("../.env.example")
	require.NoError(t, err)
	defer f.Close()

	documented := map[string]string{}
	comments := map[string]string{} // the comment lines right above each variable
	var previous, block string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := scanner.Text()
		if key, value, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			require.NotEmpty(t, previous, "%s has no comment above it", key)
			documented[key] = strings.Trim(value, `"`) // quoted where a shell would split or glob it
			comments[key] = block
		}
		switch {
		case strings.HasPrefix(line, "#"):
			block += line + "\n"
		default:
			block = ""
		}
		if line != "" {
			previous = line
		}
	}
	require.NoError(t, scanner.Err())

	required := map[string]bool{"DATABASE_URL": true, "WORKER_SERVICE": true, "API_TOKEN": true, "API_ADMIN_TOKEN": true}
	// Variables whose example is a real setting rather than the default.
	examples := map[string]string{"ANALYSIS_ROOTS": "/srv/repos"}
	type variable struct{ def, of string }
	vars := map[string]variable{}
	for _, typ := range []reflect.Type{reflect.TypeFor[config.Worker](), reflect.TypeFor[config.Scheduler](), reflect.TypeFor[config.CLI](), reflect.TypeFor[config.API](),
		// The reference app's own sections (config.LoadSection).
		reflect.TypeFor[jobsconfig.AnalysisConfig](), reflect.TypeFor[jobsconfig.MaintenanceConfig](),
	} {
		for key, def := range envVars(typ) {
			vars[key] = variable{def: def, of: typ.Name()}
		}
	}
	// The worker counts of every service of the reference app, named after
	// the service (config.Worker.Workers), default the service's own.
	for _, svc := range referenceServices(t).Services() {
		for _, class := range routing.Classes() {
			key := svc.EnvPrefix() + "QUEUE_" + strings.ToUpper(class.String()) + "_WORKERS"
			vars[key] = variable{def: strconv.Itoa(svc.Workers().Of(class)), of: "service " + svc.Name()}
		}
	}
	// The tenant limits of every service of the reference app, by tier
	// (config.LoadLimits), default 0: no limit.
	for _, svc := range referenceServices(t).Services() {
		for _, tier := range tiers.All() {
			maxRunning, rate, quota := config.LimitVars(svc, tier)
			for _, key := range []string{maxRunning, rate, quota} {
				vars[key] = variable{def: "0", of: "service " + svc.Name() + "'s tenant limits"}
			}
		}
	}
	for _, key := range []string{
		"ANALYZER_QUEUE_PRIORITY_WORKERS", "ANALYZER_QUEUE_DEFAULT_WORKERS", "ANALYZER_QUEUE_SCHEDULED_WORKERS",
		"SPECGEN_QUEUE_PRIORITY_WORKERS", "SPECGEN_QUEUE_DEFAULT_WORKERS", "SPECGEN_QUEUE_SCHEDULED_WORKERS",
	} {
		require.Contains(t, vars, key, "the reference app's variables keep their names")
	}

	for key, v := range vars {
		value, ok := documented[key]
		require.True(t, ok, "%s (%s) missing from .env.example", key, v.of)
		switch {
		case required[key]:
		case examples[key] != "":
			// A value a deployment should set, not the default: the
			// comment above says what the default is.
			require.Equal(t, examples[key], value, "%s in .env.example", key)
			require.Contains(t, comments[key], "(default "+v.def+")", "%s: the comment above names the default", key)
		default:
			require.Equal(t, v.def, value, "%s default in .env.example", key)
		}
	}
}
