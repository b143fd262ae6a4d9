package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// config holds every setting of the sample; parseFlags fills it from the
// command line and check validates the combination.
type config struct {
	store           string // memory, azure or redis
	azureConnString string
	azureAccount    string
	azureKey        string
	azureServiceURL string
	azureContainer  string
	redisAddr       string
	redisPrefix     string

	replicas int
	duration time.Duration
	budget   uint32 // the datastore's provisioned RU/s
	reserved uint32 // RU/s each replica always has
	factor   uint32 // RU/s one shared partition is worth
	cost     uint32 // RU per record
	batch    uint32 // records per datastore request
	workers  int    // concurrent requests per replica without the library
	latency  time.Duration
	headroom int // RU/s of the budget the replicas leave unused; -1: one request per replica

	single         bool
	name           string
	datastoreURL   string
	serveDatastore bool
	compare        bool
	report         string
	port           int

	logFormat string
	logLevel  string
}

// defaultConfig returns go-batcher's example: a 20,000 RU/s container shared
// by 4 replicas that each reserve 2,000 RU/s and share the other 12,000 in
// partitions of 1,000, writing records of 10 RU.
func defaultConfig() config {
	return config{
		store:          "memory",
		azureContainer: "batcher-sample",
		redisAddr:      "127.0.0.1:6379",
		redisPrefix:    "batcher-sample",
		replicas:       4,
		duration:       30 * time.Second,
		budget:         20000,
		reserved:       2000,
		factor:         1000,
		cost:           10,
		batch:          10,
		workers:        8,
		latency:        5 * time.Millisecond,
		headroom:       -1,
		compare:        true,
		report:         "sample-report.html",
		logFormat:      "console",
		logLevel:       "info",
	}
}

// parseFlags reads args (without the program name) into a config.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	c := defaultConfig()
	fs := flag.NewFlagSet("sample", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.store, "store", c.store, "where the replicas keep their leases: memory, azure or redis")
	fs.StringVar(&c.azureConnString, "azure-connection-string", "", "Azure Storage connection string (Azurite or a real account)")
	fs.StringVar(&c.azureAccount, "azure-account", "", "storage account name (with --azure-key, or alone for DefaultAzureCredential)")
	fs.StringVar(&c.azureKey, "azure-key", "", "storage account key")
	fs.StringVar(&c.azureServiceURL, "azure-service-url", "", "blob endpoint, e.g. http://127.0.0.1:10000/devstoreaccount1 for Azurite")
	fs.StringVar(&c.azureContainer, "azure-container", c.azureContainer, "container that holds the partition blobs")
	fs.StringVar(&c.redisAddr, "redis-addr", c.redisAddr, "Redis host:port for --store=redis")
	fs.StringVar(&c.redisPrefix, "redis-prefix", c.redisPrefix, "key prefix shared by the replicas in Redis")
	fs.IntVar(&c.replicas, "replicas", c.replicas, "replicas sharing the budget (with --single: how many processes will share it)")
	fs.DurationVar(&c.duration, "duration", c.duration, "length the load is sized for: it needs about this long at the full budget")
	u32(fs, &c.budget, "budget", "the datastore's provisioned throughput, in `RU/s`")
	u32(fs, &c.reserved, "reserved", "`RU/s` reserved for each replica; the rest of the budget is shared")
	u32(fs, &c.factor, "factor", "`RU/s` one shared partition is worth")
	u32(fs, &c.cost, "cost", "`RU` one record costs to write")
	u32(fs, &c.batch, "batch", "`records` per datastore request (the watcher's MaxBatchSize)")
	fs.IntVar(&c.workers, "workers", c.workers, "concurrent requests per replica in the run without the library")
	fs.DurationVar(&c.latency, "latency", c.latency, "simulated datastore response time")
	fs.IntVar(&c.headroom, "headroom", c.headroom, "`RU/s` of the budget left unused, taken from the reservations if they suffice, else from the shared capacity in whole partitions (-1: one request per replica, --replicas × --batch × --cost)")
	fs.BoolVar(&c.single, "single", false, "run one replica and its HTTP server until interrupted (share with other processes through azure or redis)")
	fs.StringVar(&c.name, "name", "", "replica name with --single (default: replica-<pid>)")
	fs.StringVar(&c.datastoreURL, "datastore-url", "", "with --single: write to the datastore served by another sample process (--serve-datastore)")
	fs.BoolVar(&c.serveDatastore, "serve-datastore", false, "run only the simulated datastore, over HTTP on --port, until interrupted")
	fs.BoolVar(&c.compare, "compare", c.compare, "also run the same load without the library")
	fs.StringVar(&c.report, "report", c.report, "path of the HTML report (empty: none)")
	fs.IntVar(&c.port, "port", 0, "first HTTP port (replica i listens on port+i); 0 picks free ports")
	fs.StringVar(&c.logFormat, "log-format", c.logFormat, "console or json")
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "trace, debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, c.check()
}

// u32 registers a uint32 flag whose default is *p.
func u32(fs *flag.FlagSet, p *uint32, name, usage string) {
	fs.Func(name, fmt.Sprintf("%s (default %d)", usage, *p), func(s string) error {
		var v uint32
		if _, err := fmt.Sscanf(s, "%d", &v); err != nil {
			return fmt.Errorf("not a non-negative integer: %q", s)
		}
		*p = v
		return nil
	})
}

// shared returns the capacity the replicas share: the budget less every
// replica's reservation, so that all the capacity handed out never exceeds
// what the datastore accepts, and less the headroom when the reservations
// cannot give it (rounded up to whole partitions: a partition is worth a
// whole factor).
func (c config) shared() uint32 {
	s := c.budget - uint32(c.replicas)*c.reserved
	if !c.headroomReserved() {
		h := c.headroomRU()
		s -= min(s, (h+c.factor-1)/c.factor*c.factor)
	}
	return s
}

// headroomRU returns the RU/s the replicas leave unused. The datastore
// counts fixed one-second windows, and a replica releasing at exactly its
// capacity can land one request more than its share in a window when a
// release due just before the boundary happens just after it (timer
// jitter). One request per replica of headroom absorbs that.
func (c config) headroomRU() uint32 {
	if c.headroom < 0 {
		return uint32(c.replicas) * c.batch * c.cost
	}
	return uint32(c.headroom)
}

// headroomReserved reports whether the headroom comes out of the
// reservations, which it does when they are large enough.
func (c config) headroomReserved() bool {
	return uint64(c.headroomRU()) <= uint64(c.replicas)*uint64(c.reserved)
}

// reserve returns the capacity each replica reserves: --reserved, less its
// part of the headroom when the headroom comes out of the reservations.
func (c config) reserve() uint32 {
	if !c.headroomReserved() {
		return c.reserved
	}
	n := uint32(c.replicas)
	return c.reserved - (c.headroomRU()+n-1)/n
}

// check rejects combinations that cannot work.
func (c config) check() error {
	switch c.store {
	case "memory", "azure", "redis":
	default:
		return fmt.Errorf("--store must be memory, azure or redis, not %q", c.store)
	}
	if c.logFormat != "console" && c.logFormat != "json" {
		return fmt.Errorf("--log-format must be console or json, not %q", c.logFormat)
	}
	switch {
	case c.replicas < 1:
		return errors.New("--replicas must be at least 1")
	case c.duration < time.Second:
		return errors.New("--duration must be at least 1s")
	case c.cost == 0 || c.batch == 0 || c.factor == 0:
		return errors.New("--cost, --batch and --factor must be positive")
	case c.workers < 1:
		return errors.New("--workers must be at least 1")
	case uint64(c.replicas)*uint64(c.reserved) >= uint64(c.budget):
		return fmt.Errorf("--reserved %d × --replicas %d leaves nothing of --budget %d to share", c.reserved, c.replicas, c.budget)
	case c.shared() == 0:
		return fmt.Errorf("--headroom %d RU/s leaves nothing to share", c.headroomRU())
	case uint64(c.cost)*uint64(c.batch) > uint64(c.budget):
		return fmt.Errorf("one request (--batch %d × --cost %d RU) costs more than --budget %d", c.batch, c.cost, c.budget)
	}
	return nil
}
