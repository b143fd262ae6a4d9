package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/costwise/batcher"
)

// maxReplicas is the most replicas --replicas allows: in one process, each
// with its HTTP server, batcher and shared resource, the machine rather than
// the library is the limit beyond that.
const maxReplicas = 64

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
	reserved int    // RU/s each replica always has, its interactive allowance; -1: the expected interactive RU/s
	factor   uint32 // RU/s one shared partition is worth
	cost     uint32 // RU per record
	batch    uint32 // records per datastore request
	workers  int    // concurrent requests per replica without the library
	latency  time.Duration
	headroom int // RU/s of the budget the replicas leave unused; -1: one request per replica; default 1% of the budget
	// maxInterval is the shared resources' WithMaxInterval; 0: 100 ms with
	// the memory and Redis stores, the library's default with Azure.
	maxInterval time.Duration

	interactiveRate float64 // user requests per second to the whole service, spread evenly over the replicas
	writeShare      float64 // share of them that are writes; the rest are point reads
	readRU          uint32  // RU a point read costs
	writeRU         uint32  // RU a small write costs
	seed            uint64  // seed of the interactive arrivals, the same in both runs

	single         bool
	name           string
	datastoreURL   string
	serveDatastore bool
	compare        bool
	calibrate      bool // measure the users alone first; the latency goal is relative to it
	report         string
	port           int

	logFormat string
	logLevel  string
}

// defaultConfig returns go-batcher's example: a 20,000 RU/s container shared
// by 4 replicas writing records of 10 RU; besides the bulk jobs the service
// answers 400 user requests a second (a fifth of them writes of 5 RU, the
// rest point reads of 1 RU). Each replica reserves its expected interactive
// RU/s (180, rounded to 200); the rest of the budget, less a headroom, is
// shared in partitions of 250 RU/s.
func defaultConfig() config {
	return config{
		store:          "memory",
		azureContainer: "batcher-sample",
		redisAddr:      "127.0.0.1:6379",
		redisPrefix:    "batcher-sample",
		replicas:       4,
		duration:       30 * time.Second,
		budget:         20000,
		reserved:       -1,
		factor:         250,
		cost:           10,
		batch:          10,
		workers:        8,
		latency:        5 * time.Millisecond,
		headroom:       200,
		compare:        true,
		calibrate:      true,

		interactiveRate: 400,
		writeShare:      0.2,
		readRU:          1,
		writeRU:         5,
		seed:            1,

		report:    "sample-report.html",
		logFormat: "console",
		logLevel:  "info",
	}
}

// parseFlags reads args (without the program name) into a config.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	c := defaultConfig()
	fs := flag.NewFlagSet("sample", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.store, "store", c.store, "where the replicas keep their leases: memory, azure or redis")
	fs.StringVar(&c.azureConnString, "azure-connection-string", "", "Azure Storage connection string (Azurite or a real account)")
	fs.StringVar(&c.azureAccount, "azure-account", "", "storage account name (with --azure-key)")
	fs.StringVar(&c.azureKey, "azure-key", "", "storage account key")
	fs.StringVar(&c.azureServiceURL, "azure-service-url", "", "blob endpoint, e.g. http://127.0.0.1:10000/devstoreaccount1 for Azurite")
	fs.StringVar(&c.azureContainer, "azure-container", c.azureContainer, "container that holds the partition blobs")
	fs.StringVar(&c.redisAddr, "redis-addr", c.redisAddr, "Redis host:port for --store=redis")
	fs.StringVar(&c.redisPrefix, "redis-prefix", c.redisPrefix, "key prefix shared by the replicas in Redis")
	fs.IntVar(&c.replicas, "replicas", c.replicas, "replicas sharing the budget (with --single: how many processes will share it)")
	fs.DurationVar(&c.duration, "duration", c.duration, "length the load is sized for: it needs about this long at the full budget")
	u32(fs, &c.budget, "budget", "the datastore's provisioned throughput, in `RU/s`")
	fs.IntVar(&c.reserved, "reserved", c.reserved, "`RU/s` reserved for each replica, its allowance for interactive traffic (-1: its expected interactive RU/s, rounded up to a multiple of 50); the rest of the budget is shared")
	u32(fs, &c.factor, "factor", "`RU/s` one shared partition is worth")
	fs.DurationVar(&c.maxInterval, "max-interval", 0, "longest wait of a replica between two looks at the lease store while it needs partitions (0: 100ms with memory and redis, the library's default of 500ms with azure, whose calls are billed)")
	fs.Float64Var(&c.interactiveRate, "interactive-rate", c.interactiveRate, "user `requests/s` to the whole service, spread evenly over the replicas (Poisson arrivals); 0 for none")
	fs.Float64Var(&c.writeShare, "interactive-writes", c.writeShare, "`share` of the user requests that are small writes; the rest are point reads")
	u32(fs, &c.readRU, "read-ru", "`RU` a point read costs")
	u32(fs, &c.writeRU, "write-ru", "`RU` a small write costs")
	fs.Uint64Var(&c.seed, "seed", c.seed, "seed of the user requests' arrivals and kinds (the same in both runs)")
	u32(fs, &c.cost, "cost", "`RU` one record costs to write")
	u32(fs, &c.batch, "batch", "`records` per datastore request (the watcher's MaxBatchSize)")
	fs.IntVar(&c.workers, "workers", c.workers, "concurrent requests per replica in the run without the library")
	fs.DurationVar(&c.latency, "latency", c.latency, "simulated datastore response time")
	fs.IntVar(&c.headroom, "headroom", c.headroom, "`RU/s` of the budget left unused, taken from the shared capacity, which is then rounded down to whole partitions (-1: one request per replica, --replicas × --batch × --cost)")
	fs.BoolVar(&c.single, "single", false, "run one replica and its HTTP server until interrupted (share with other processes through azure or redis)")
	fs.StringVar(&c.name, "name", "", "replica name with --single (default: replica-<pid>)")
	fs.StringVar(&c.datastoreURL, "datastore-url", "", "with --single: write to the datastore served by another sample process (--serve-datastore)")
	fs.BoolVar(&c.serveDatastore, "serve-datastore", false, "run only the simulated datastore, over HTTP on --port, until interrupted")
	fs.BoolVar(&c.compare, "compare", c.compare, "also run the same load without the library")
	fs.BoolVar(&c.calibrate, "calibrate", c.calibrate, "first send the user requests alone for 3 s and set the latency goal to twice their p99 (false: twice the datastore's latency)")
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
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return fmt.Errorf("not an integer from 0 to %d: %q", uint32(math.MaxUint32), s)
		}
		*p = uint32(v)
		return nil
	})
}

// leaseInterval returns the max interval of the shared resources in
// milliseconds: --max-interval, or 100 ms with the memory and Redis stores
// (a look costs microseconds there) and the library's default with Azure
// Blob Storage, where every call is billed.
func (c config) leaseInterval() uint32 {
	switch {
	case c.maxInterval > 0:
		return uint32(max(c.maxInterval.Milliseconds(), 1))
	case c.store == "azure":
		return batcher.DefaultMaxInterval
	}
	return 100
}

// interactiveRU returns the RU/s the user requests cost each replica on
// average: its part of the rate times the mean cost of a request.
func (c config) interactiveRU() float64 {
	mean := c.writeShare*float64(c.writeRU) + (1-c.writeShare)*float64(c.readRU)
	return c.interactiveRate / float64(c.replicas) * mean
}

// reserve returns the capacity each replica reserves: --reserved, or, when
// that is -1, the replica's expected interactive RU/s rounded up to a
// multiple of 50. It is the replica's allowance for its user requests: a
// replica with no bulk work holds no partition, and its interactive traffic
// must still have room.
func (c config) reserve() uint32 {
	if c.reserved >= 0 {
		return uint32(c.reserved)
	}
	return uint32(math.Ceil(c.interactiveRU()/50)) * 50
}

// headroomRU returns the RU/s the replicas leave unused. The datastore
// counts fixed one-second windows, and a replica releasing at exactly its
// capacity can land one request more than its share in a window when a
// release due just before the boundary happens just after it (timer
// jitter); a user request's charge reaches the batcher a moment after the
// datastore counted it. The default, 1% of the budget, absorbs most of
// that; -1 leaves one request per replica, which absorbs all of it.
func (c config) headroomRU() uint32 {
	if c.headroom < 0 {
		return uint32(c.replicas) * c.batch * c.cost
	}
	return uint32(c.headroom)
}

// shared returns the capacity the replicas share: the budget less every
// replica's reservation and the headroom, rounded down to whole partitions
// (a partition is worth a whole factor), so that all the capacity handed
// out never exceeds what the datastore accepts. It is zero when nothing is
// left.
func (c config) shared() uint32 {
	out := uint64(c.replicas)*uint64(c.reserve()) + uint64(c.headroomRU())
	if out >= uint64(c.budget) {
		return 0
	}
	s := c.budget - uint32(out)
	return s / c.factor * c.factor
}

// unused returns the RU/s of the budget no replica can ever hold: the
// headroom and what the rounding to partitions left.
func (c config) unused() uint32 {
	return c.budget - uint32(c.replicas)*c.reserve() - c.shared()
}

// check rejects combinations that cannot work.
func (c config) check() error {
	switch c.store {
	case "memory", "azure", "redis":
	default:
		return fmt.Errorf("--store must be memory, azure or redis, not %q", c.store)
	}
	if c.store == "azure" && c.azureConnString == "" && (c.azureAccount == "" || c.azureKey == "") {
		return errors.New("--store=azure needs --azure-connection-string, or --azure-account with --azure-key")
	}
	if c.logFormat != "console" && c.logFormat != "json" {
		return fmt.Errorf("--log-format must be console or json, not %q", c.logFormat)
	}
	switch {
	case c.replicas < 1:
		return errors.New("--replicas must be at least 1")
	case c.maxInterval < 0 || c.maxInterval > time.Minute:
		return errors.New("--max-interval must be between 0 and 1m")
	case c.duration < time.Second:
		return errors.New("--duration must be at least 1s")
	case c.cost == 0 || c.batch == 0 || c.factor == 0:
		return errors.New("--cost, --batch and --factor must be positive")
	case c.workers < 1:
		return errors.New("--workers must be at least 1")
	case c.reserved < -1 || c.reserved > math.MaxUint32:
		return fmt.Errorf("--reserved must be -1 (automatic) or from 0 to %d", uint32(math.MaxUint32))
	case c.headroom < -1 || c.headroom > math.MaxUint32:
		return fmt.Errorf("--headroom must be -1 (one request per replica) or from 0 to %d", uint32(math.MaxUint32))
	case c.replicas > maxReplicas:
		return fmt.Errorf("--replicas must be at most %d", maxReplicas)
	case c.interactiveRate < 0 || c.interactiveRate > 100_000 || math.IsNaN(c.interactiveRate):
		return errors.New("--interactive-rate must be between 0 and 100000")
	case !(c.writeShare >= 0 && c.writeShare <= 1):
		return errors.New("--interactive-writes must be between 0 and 1")
	case c.readRU == 0 || c.writeRU == 0:
		return errors.New("--read-ru and --write-ru must be positive")
	case c.shared() == 0:
		return fmt.Errorf("--reserved %d × --replicas %d and --headroom %d RU/s leave nothing of --budget %d to share in partitions of --factor %d",
			c.reserve(), c.replicas, c.headroomRU(), c.budget, c.factor)
	case uint64(c.cost)*uint64(c.batch) > uint64(c.budget):
		return fmt.Errorf("one request (--batch %d × --cost %d RU) costs more than --budget %d", c.batch, c.cost, c.budget)
	}
	return nil
}
