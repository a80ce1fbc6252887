package bench

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Where the scaleout scenario's curve bends is a question of CPU: the
// worker processes, their PostgreSQL backends, the bench itself and
// whatever else runs on the machine share its cores. cpuTicks reads what
// each used from Linux's /proc; elsewhere (or for a server on another
// host, whose backends are not this machine's processes) nothing is read
// and the scenario reports 0.

// userHz is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// ABI Go supports).
const userHz = 100

// machineTicks is the CPU time this machine's cores have been busy (all
// but idle and iowait) since boot, in ticks; ok is false without
// /proc/stat.
func machineTicks() (busy float64, ok bool) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(raw, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, false
	}
	// user nice system idle iowait irq softirq steal (guest time is in user)
	for i, f := range fields[1:9] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, false
		}
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, true
}

// processTicks is the CPU time (user and system) process pid has used, in
// ticks; ok is false when it cannot be read (no /proc, no such process).
// comm, when not "", must be the process's command name: a PostgreSQL
// backend's pid, read from the server, is one of this machine's processes
// only when the server runs here.
func processTicks(pid int, comm string) (ticks float64, ok bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid … utime stime …: comm may hold spaces and
	// parentheses, so the fields are counted from the last ')'.
	open, end := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
	if open < 0 || end < open {
		return 0, false
	}
	if comm != "" && string(raw[open+1:end]) != comm {
		return 0, false
	}
	fields := strings.Fields(string(raw[end+1:]))
	if len(fields) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return utime + stime, true
}

// cpuSample is the CPU time, in ticks, used so far by the machine, by this
// process, and by each worker process and PostgreSQL backend the scaleout
// scenario watches (by pid).
type cpuSample struct {
	machine, bench     float64
	machineOK, benchOK bool
	workers, backends  map[int]float64
}

// sampleCPU reads the CPU times of the machine, this process, workers and
// backends (PostgreSQL backends, checked to be this machine's).
func sampleCPU(workers, backends []int) cpuSample {
	s := cpuSample{workers: map[int]float64{}, backends: map[int]float64{}}
	s.machine, s.machineOK = machineTicks()
	s.bench, s.benchOK = processTicks(os.Getpid(), "")
	for _, pid := range workers {
		if t, ok := processTicks(pid, ""); ok {
			s.workers[pid] = t
		}
	}
	for _, pid := range backends {
		if t, ok := processTicks(pid, "postgres"); ok {
			s.backends[pid] = t
		}
	}
	return s
}

// cpuUse is the CPU used between two samples, in cores (CPU seconds per
// second); 0 for what could not be read.
type cpuUse struct {
	machine, bench, workers, backends float64
}

// cpuBetween is what was used from a to b over seconds. A process in b but
// not in a (a backend opened meanwhile) counts from 0.
func cpuBetween(a, b cpuSample, seconds float64) cpuUse {
	var u cpuUse
	if a.machineOK && b.machineOK {
		u.machine = (b.machine - a.machine) / userHz / seconds
	}
	if a.benchOK && b.benchOK {
		u.bench = (b.bench - a.bench) / userHz / seconds
	}
	sum := func(a, b map[int]float64) float64 {
		var t float64
		for pid, v := range b {
			t += v - a[pid]
		}
		return t / userHz / seconds
	}
	u.workers, u.backends = sum(a.workers, b.workers), sum(a.backends, b.backends)
	return u
}
