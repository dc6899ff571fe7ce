#!/bin/sh
# history-template.sh NAME ROWS: builds database NAME on the server of $DATABASE_URL
# (a role that may CREATE DATABASE) as a template for `taskforge bench
# --database-template NAME`: the migrations of $TASKFORGE (default bin/taskforge),
# then ROWS finished tasks with one attempt each in history, set-based (INSERT ...
# SELECT generate_series, 500,000 tasks a statement), as a queue "archive" that
# finished them over the last six days: 90 % done, 6 % cancelled, 4 % dead, one in
# ten with an idempotency key. Then VACUUM ANALYZE, as autovacuum would get to, and a
# checkpoint. The day partitions exist first, so nothing lands in a default one;
# retention (7 days for done and cancelled) has nothing to drop while a step runs.
#
#   ./bin/taskforge bench with-servers -- sh -c \
#     'internal/bench/history-template.sh tf_history_10m 10000000 && ./bin/taskforge bench \
#        --database-template tf_history_10m --experiments e1,enqueue --e1-layouts 1x1/plain'
set -eu
NAME=$1
ROWS=$2
TASKFORGE=${TASKFORGE:-bin/taskforge}
SLICE=500000
# DATABASE_URL with its database replaced by NAME
DB_URL=$(printf '%s' "$DATABASE_URL" | sed -E "s#^([a-z]+://[^/?]*)(/[^?]*)?#\1/$NAME#")

psql -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $NAME WITH (FORCE)" -c "CREATE DATABASE $NAME"
"$TASKFORGE" migrate --database-url "$DB_URL" --move-history=false
psql -X -q -v ON_ERROR_STOP=1 "$DB_URL" \
	-c "INSERT INTO queues (name) VALUES ('archive')" \
	-c "SELECT taskforge_ensure_history_partitions((now() AT TIME ZONE 'UTC')::date - 6, 7)" >/dev/null

start=$(date +%s)
i=0
while [ "$i" -lt "$ROWS" ]; do
	n=$((ROWS - i))
	[ "$n" -gt "$SLICE" ] && n=$SLICE
	psql -X -q -v ON_ERROR_STOP=1 "$DB_URL" -v first="$i" -v n="$n" -v rows="$ROWS" <<'SQL'
WITH src AS (
	SELECT g AS i,
		CASE WHEN g % 50 < 45 THEN 'done' WHEN g % 50 < 48 THEN 'cancelled' ELSE 'dead' END AS status,
		-- finished over the six days before now, oldest first
		now() - interval '6 days' + (g::float8 / :rows) * interval '6 days' AS finished
	FROM generate_series(:first + 1, :first + :n) AS g
), ins AS (
	INSERT INTO task_history (id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
		idempotency_key, result, last_error, claimed_by, created_at, updated_at, finished_at)
	SELECT gen_random_uuid(), 'archive', jsonb_build_object('order', i, 'customer', i % 9973), 5, status,
		finished - interval '2 seconds', 1, 3,
		CASE WHEN i % 10 = 0 THEN 'key-' || i END,
		CASE WHEN status = 'done' THEN '{"ok": true}'::jsonb END,
		CASE WHEN status = 'dead' THEN 'handler failed' END,
		'worker-' || (i % 16), finished - interval '2 seconds', finished, finished
	FROM src
	RETURNING id, queue, status, created_at, finished_at, idempotency_key
), att AS (
	INSERT INTO attempt_history (task_id, attempt, queue, worker_id, lease_token, status, started_at,
		finished_at, error, task_status, task_finished_at)
	SELECT id, 1, queue, 'worker-1', gen_random_uuid(),
		CASE status WHEN 'done' THEN 'succeeded' WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END,
		created_at, finished_at, CASE WHEN status = 'dead' THEN 'handler failed' END, status, finished_at
	FROM ins
)
INSERT INTO idempotency_keys (queue, key, task_id, created_at)
SELECT queue, idempotency_key, id, created_at FROM ins WHERE idempotency_key IS NOT NULL;
SQL
	i=$((i + n))
	echo "history-template: $i / $ROWS finished tasks ($(($(date +%s) - start)) s)" >&2
done
psql -X -q -v ON_ERROR_STOP=1 "$DB_URL" -c "VACUUM (ANALYZE)" -c "CHECKPOINT"
psql -X -At "$DB_URL" -c "SELECT 'history-template: ' || (SELECT count(*) FROM task_history) || ' tasks, '
	|| (SELECT count(*) FROM attempt_history) || ' attempts, ' || pg_size_pretty(pg_database_size(current_database()))
	|| ', ' || (SELECT count(*) FROM task_history WHERE tableoid::regclass::text LIKE '%default') || ' in default partitions'" >&2
echo "history-template: $NAME built in $(($(date +%s) - start)) s" >&2
