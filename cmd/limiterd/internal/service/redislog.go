package service

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// redisLogger hands go-redis's log lines to limiterd's logger, so that
// --log-format json keeps every line of standard error JSON. go-redis
// writes few lines, all about trouble (a dial that failed, a pool that
// could not find a usable connection), so they are logged at warn.
type redisLogger struct{ log *slog.Logger }

// Printf implements go-redis's internal.Logging.
func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimRight(fmt.Sprintf(format, v...), "\n")
	l.log.WarnContext(context.WithoutCancel(ctx), msg, "component", "go-redis")
}
