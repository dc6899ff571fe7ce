package storage

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// EnqueueTasks is the enqueue's statement, for the plan tests.
var EnqueueTasks = enqueueTasks

// ByIDStatements are the statements that take tasks by id, for the plan tests.
var ByIDStatements = map[string]string{
	"claim":           claimTasks,
	"heartbeat":       heartbeatTask,
	"heartbeat batch": heartbeatTasks,
	"ack":             ackTasks,
	"ack plain":       ackPlainTasks,
	"ack plain refs":  ackPlainTaskRefs,
	"nack":            nackTask,
	"release":         releaseTask,
}

// HotPathSettingsStatement sets a hot-path connection's session settings
// (HotPathSettings), for the plan tests.
var HotPathSettingsStatement = hotPathSettings

// HotByIDStatements are the statements of ByIDStatements that run on the hot-path
// pool (WithHotPool), for the plan tests.
var HotByIDStatements = map[string]string{
	"claim":           claimTasks,
	"heartbeat":       heartbeatTask,
	"heartbeat batch": heartbeatTasks,
	"ack plain":       ackPlainTasks,
	"ack plain refs":  ackPlainTaskRefs,
}

// DispatchDueGrouped is a fair queue's dispatch, which also runs on the hot-path
// pool, for the plan tests.
var DispatchDueGrouped = dispatchDueGrouped

// ListTasks is the task list's statement, for the plan tests.
var ListTasks = listTasks

// ListWorkers is the workers list's statement, for the plan tests.
var ListWorkers = listWorkers

// Statements are every statement the Store runs, by name, for TestStatementColumns.
var Statements = statements

// TaskColumnNames are the columns of a task row, in scan order.
var TaskColumnNames = taskColumnNames

// StatementFile is the whole file of statement name, header included.
func StatementFile(name string) string {
	b, err := statementFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(err)
	}
	return string(b)
}

// AckPlainTasks is the plain ack's statement, for TestPlainLeaseTokens.
var AckPlainTasks = ackPlainTasks

// ListBufferedStatement is the repair pass's page, for the plan tests.
var ListBufferedStatement = listBuffered

// ExplainListBuffered is the plan of ListBuffered's page from the start, planned as
// ListBuffered plans it.
func (s *Store) ExplainListBuffered(ctx context.Context) (string, error) {
	var lines []string
	err := s.inOrderedScan(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "EXPLAIN "+listBuffered, nil, nil, 0.0, 4000, nil)
		if err != nil {
			return err
		}
		lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return strings.Join(lines, "\n"), err
}
