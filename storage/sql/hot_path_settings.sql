-- name: hot_path_settings
-- hot_path_settings sets, for the session, the settings of a hot-path connection (see
-- HotPathSettings): generic plans, made without sequential or bitmap scans (a
-- hot-path statement reads few rows of large tables: by primary key, or the heads of
-- a queue's dispatch index; see statements.go), and the queue and group counts
-- written inline (migrations 0013 and 0028).
--
-- Parameters: none.
-- Returns: set_config, set_config, set_config, set_config, set_config (the new values;
-- ignored).
SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
	set_config('enable_seqscan', 'off', false),
	set_config('enable_bitmapscan', 'off', false),
	set_config('taskforge.tally', 'inline', false),
	set_config('taskforge.group_tally', 'inline', false)
