package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/sealer"
)

// DueChannel is the LISTEN/NOTIFY channel on which enqueues announce due work; the
// payload is the queue name.
const DueChannel = "taskforge_due"

// Store runs TaskForge's queries against a PostgreSQL pool.
type Store struct {
	pool *pgxpool.Pool
	// hot runs the statements on every task's path (the enqueue, a fair queue's
	// dispatch, the claim, the ack of a task outside a workflow, heartbeats) on
	// connections opened with HotPathSettings; it is pool unless WithHotPool says
	// otherwise.
	hot    *pgxpool.Pool
	sealer *sealer.Sealer   // nil: payloads, results and error texts are stored in clear
	clock  func() time.Time // nil: the database's now() (see WithClock)
	// retention is what a queue's retention leaves out (WithRetentionDefaults).
	retention Retention
	// bulkDuty is the share of its time a bulk operation spends in batches, in
	// (0, 1]: DefaultBulkDuty unless WithBulkDuty says otherwise.
	bulkDuty float64
}

// Option configures a Store.
type Option func(*Store)

// WithSealer encrypts payloads, results and error texts at rest: they are sealed before every
// write and opened after every read, so callers only ever see plain JSON.
func WithSealer(x *sealer.Sealer) Option { return func(s *Store) { s.sealer = x } }

// DefaultBulkDuty is the share of its time a bulk cancel or discard spends
// writing batches; it rests the remainder (see WithBulkDuty).
const DefaultBulkDuty = 0.5

// WithBulkDuty makes bulk cancels and discards spend at most duty of their time
// writing batches (0 < duty ≤ 1; 1 writes them back to back) and rest the
// remainder, so that the WAL they write leaves room for other queues' commits. Out
// of range values are the default.
func WithBulkDuty(duty float64) Option {
	return func(s *Store) {
		if duty > 0 && duty <= 1 {
			s.bulkDuty = duty
		}
	}
}

// WithClock makes now() the time the statements that compute or compare lease
// expiries and due times run at (claim, heartbeat, ack, nack, release, reclaim,
// dispatch, the sweep and the repair pass), instead of the database's now(), so
// that a test sets the clock rather than sleeping until a lease expires or a
// retry is due. A zero time from now means the database's now() for that call.
// Production stores leave it unset. Statements that only say how long to wait
// (NextDue, NewlyDue, NextLeaseExpiry) and Now keep the database clock: they feed
// wall-clock timers.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// WithHotPool runs the statements on every task's path (the enqueue, a fair
// queue's dispatch, the claim, the ack of a task outside a workflow, heartbeats) on
// hot, a pool opened with HotPathSettings, rather than on the main pool. Their connections plan each of
// these statements once and write the statements' count deltas themselves, which
// takes about half of PostgreSQL's CPU off a single-task claim and ack.
func WithHotPool(hot *pgxpool.Pool) Option { return func(s *Store) { s.hot = hot } }

// New returns a Store on pool. The pool should be opened with Connect (or have
// ConfigureConn applied) so that times come back in UTC.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, bulkDuty: DefaultBulkDuty, retention: DefaultRetention(DefaultDoneRetention)}
	for _, o := range opts {
		o(s)
	}
	if s.hot == nil {
		s.hot = pool
	}
	return s
}

// Pool returns the underlying pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// HotPool returns the pool of the hot-path statements (Pool, unless WithHotPool).
func (s *Store) HotPool() *pgxpool.Pool { return s.hot }

// ConnectOption tunes Connect.
type ConnectOption func(*pgxpool.Config)

// PooledExecMode is the query execution mode BehindTransactionPooler picks: each
// query carries its own parse (an unnamed statement, one round trip once the
// statement's description is cached per connection), so no named prepared
// statement has to outlive a transaction.
const PooledExecMode = pgx.QueryExecModeCacheDescribe

// BehindTransactionPooler says url reaches PostgreSQL through a pooler in
// transaction mode (PgBouncer before 1.21, or with max_prepared_statements = 0),
// where a server session is only lent for one transaction: queries then use
// PooledExecMode instead of named prepared statements. A default_query_exec_mode
// written in the URL wins, e.g. cache_statement for a pooler that keeps prepared
// statements.
func BehindTransactionPooler(url string) ConnectOption {
	return func(cfg *pgxpool.Config) {
		if !strings.Contains(url, "default_query_exec_mode") {
			cfg.ConnConfig.DefaultQueryExecMode = PooledExecMode
		}
	}
}

// HotPathSettings makes a pool's connections fit for WithHotPool. Each connection
//
//   - plans each statement once (plan_cache_mode = force_generic_plan). The
//     hot-path statements take tasks by primary key (see statements.go), so their
//     generic plan is the one a custom plan would pick; left to choose, PostgreSQL
//     re-planned the claim on every call (about 0.4 ms of CPU) because it costs the
//     generic plan's id array at ten rows and a custom plan's at the one it holds;
//   - makes those plans without sequential or bitmap scans (enable_seqscan and
//     enable_bitmapscan off): a plan made once is kept while the table grows, and
//     one made while tasks was small chose a scan of it; the hot-path statements
//     read tasks by primary key or the heads of a queue's dispatch index, so an
//     index scan is what they take on a table of any size;
//   - writes the count deltas of the hot-path statements in the statements
//     themselves (taskforge.tally = 'inline'; migration 0013), so that the tally
//     triggers, which cost each statement a PL/pgSQL call and a query of its
//     transition tables, stand aside; and likewise the named groups' count deltas
//     (taskforge.group_tally = 'inline'; migration 0028), one row per group and
//     status per statement instead of a row trigger's call and row per task.
//
// These are session settings, which a transaction pooler does not keep: behind one
// (BehindTransactionPooler) it changes nothing, the store should be given no hot
// pool, and the triggers count as before. Only the statements the Store sends to
// its hot pool may run on such a connection; any other write would go uncounted.
func HotPathSettings() ConnectOption {
	return func(cfg *pgxpool.Config) {
		next := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if next != nil {
				if err := next(ctx, conn); err != nil {
					return err
				}
			}
			if conn.Config().DefaultQueryExecMode == PooledExecMode {
				return nil
			}
			if _, err := conn.Exec(ctx, hotPathSettings); err != nil {
				return fmt.Errorf("hot-path session settings: %w", err)
			}
			return nil
		}
	}
}

// Connect opens a pool on url with TaskForge's connection settings.
func Connect(ctx context.Context, url string, maxConns int32, opts ...ConnectOption) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	// No JIT: TaskForge's statements are short, and a cached generic plan whose
	// LIMIT is a parameter is costed as if it read a tenth of a large backlog, which
	// made PostgreSQL JIT-compile the dispatch statement on every run (~0.9 s each
	// with 4 million pending tasks). A SET, not a startup parameter, which a pooler
	// would refuse; behind a transaction pooler (PooledExecMode) it is left out,
	// since a session setting cannot be kept there, and each statement is planned
	// with its values anyway. The URL may still set jit.
	noJIT := !strings.Contains(url, "jit=")
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		ConfigureConn(conn)
		if noJIT && conn.Config().DefaultQueryExecMode != PooledExecMode {
			if _, err := conn.Exec(ctx, disableJIT); err != nil {
				return fmt.Errorf("turn JIT off: %w", err)
			}
		}
		return nil
	}
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// ConfigureConn makes conn scan timestamps in UTC, so API times are RFC 3339 UTC,
// and encode and read ids without a detour through their text (encodeUUIDs,
// decodeUUIDs).
func ConfigureConn(conn *pgx.Conn) {
	encodeUUIDs(conn.TypeMap())
	decodeUUIDs(conn.TypeMap())
	conn.TypeMap().RegisterType(&pgtype.Type{
		Name: "timestamptz", OID: pgtype.TimestamptzOID,
		Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC},
	})
}

// Ping checks that PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}

// collectTasks reads task rows, opening sealed payloads, results and errors.
func (s *Store) collectTasks(rows pgx.Rows) ([]Task, error) {
	return s.appendTasks(nil, rows)
}

// appendTasks is collectTasks appending to dst (appendByPosition).
func (s *Store) appendTasks(dst []Task, rows pgx.Rows) ([]Task, error) {
	n := len(dst)
	tasks, err := appendByPosition(dst, rows, taskColumnNames, appendTaskFields)
	if err != nil {
		return nil, err
	}
	for i := n; i < len(tasks); i++ {
		if err := s.open(&tasks[i]); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}

// endedTask is a row of a statement that ends tasks: the task, and what its end did
// to the rest of its workflow (NULL for a plain task: nothing is decoded).
type endedTask struct {
	Task
	WFEffects *StepEffects `db:"wf_effects"`
}

// appendEnded is collectEnded appending to dst.
func (s *Store) appendEnded(dst []Task, rows pgx.Rows) ([]Task, error) {
	tasks, err := s.collectEnded(rows)
	if err != nil {
		return nil, err
	}
	return append(dst, tasks...), nil
}

// collectEnded reads the rows of a statement that ends tasks (ackTasks), with each
// task's Effects.
func (s *Store) collectEnded(rows pgx.Rows) ([]Task, error) {
	ended, err := collectByPosition(rows, endedColumnNames, endedFields)
	if err != nil {
		return nil, err
	}
	tasks := make([]Task, len(ended))
	for i := range ended {
		tasks[i] = ended[i].Task
		tasks[i].Effects = ended[i].WFEffects
		if err := s.open(&tasks[i]); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}

// oneEnded is one for a statement that ends one task (nackTask, releaseTask).
func (s *Store) oneEnded(rows pgx.Rows, err error, notFound error) (Task, error) {
	row, err := one[endedTask](rows, err, notFound)
	if err != nil {
		return Task{}, err
	}
	t := row.Task
	t.Effects = row.WFEffects
	return t, s.open(&t)
}

// open replaces t's sealed payload, result, progress and last error with their plain forms.
func (s *Store) open(t *Task) error {
	if s.sealer == nil || t.ID == uuid.Nil {
		return nil
	}
	var err error
	if t.Payload, err = s.sealer.Open(t.Queue, sealer.Payload, t.Payload); err != nil {
		return fmt.Errorf("task %s payload: %w", t.ID, err)
	}
	if t.Result, err = s.sealer.Open(t.ID.String(), sealer.Result, t.Result); err != nil {
		return fmt.Errorf("task %s result: %w", t.ID, err)
	}
	if t.Progress, err = s.sealer.Open(t.ID.String(), sealer.Progress, t.Progress); err != nil {
		return fmt.Errorf("task %s progress: %w", t.ID, err)
	}
	if err = s.openError(t.ID, t.LastError); err != nil {
		return fmt.Errorf("task %s last error: %w", t.ID, err)
	}
	return nil
}

// openError replaces a sealed error text of task in place.
func (s *Store) openError(task uuid.UUID, text *string) error {
	if s.sealer == nil || text == nil {
		return nil
	}
	plain, err := s.sealer.OpenText(task.String(), sealer.Error, *text)
	if err == nil {
		*text = plain
	}
	return err
}

// seal returns what to store for v: v itself, or its sealed form when encryption is on.
func (s *Store) seal(binding string, field sealer.Field, v json.RawMessage) (json.RawMessage, error) {
	if s.sealer == nil {
		return v, nil
	}
	return s.sealer.Seal(binding, field, v)
}

// sealError returns what to store for a worker's error text of task: the text
// itself, or its sealed form when encryption is on. An empty text stays empty.
func (s *Store) sealError(task uuid.UUID, text string) (string, error) {
	if s.sealer == nil || text == "" {
		return text, nil
	}
	sealed, err := s.sealer.SealText(task.String(), sealer.Error, text)
	if err != nil {
		return "", fmt.Errorf("seal the error text of task %s: %w", task, err)
	}
	return sealed, nil
}

// one returns the only row of rows, or notFound when there is none.
func one[T any](rows pgx.Rows, err error, notFound error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	v, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[T])
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, notFound
	}
	return v, err
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// now is the time argument of the statements that take one: the clock's time, or
// nil (SQL NULL, which they read as the database's now()) without a clock or when
// it reads zero.
func (s *Store) now() *time.Time {
	if s.clock == nil {
		return nil
	}
	return optional(s.clock())
}

// optional returns nil for the zero value, so it binds as SQL NULL.
func optional[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// cursorArgs splits a cursor into its two nullable query arguments.
func cursorArgs(c *Cursor) (*time.Time, *uuid.UUID) {
	if c == nil {
		return nil, nil
	}
	return &c.Time, &c.ID
}
