"""A fair queue's groups through the producer client, against a real replica."""

from __future__ import annotations

import uuid

import pytest

import taskforge


def test_fair_queue_settings_and_groups(client: taskforge.Client) -> None:
    queue = "py-fair-" + uuid.uuid4().hex[:12]
    q = client.create_queue(queue, fairness="round_robin", group_max_concurrency=2, paused=True)
    assert q.fairness == "round_robin" and q.group_max_concurrency == 2 and q.group_rate_limit is None
    q = client.update_queue(queue, group_rate_limit=4.0, group_rate_burst=8)
    assert q.group_rate_limit == 4.0 and q.group_rate_burst == 8 and q.group_max_concurrency == 2
    q = client.update_queue(queue, group_rate_limit=None, group_rate_burst=None)
    assert q.group_rate_limit is None and q.group_rate_burst is None and q.fairness == "round_robin"

    client.enqueue_batch(queue, [taskforge.NewTask(payload=1, group="acme"), taskforge.NewTask(payload=2, group="acme"),
                                 taskforge.NewTask(payload=3, group="beta")])
    acme = client.get_group(queue, "acme")
    assert acme.group == "acme" and acme.pending + acme.claimed == 2 and acme.weight is None
    assert acme.effective == taskforge.GroupLimits(weight=1, max_concurrency=2, rate_limit=None, rate_burst=None)

    g = client.put_group(queue, "acme", weight=3, rate_limit=2.0)
    assert g.weight == 3 and g.max_concurrency is None
    assert g.effective == taskforge.GroupLimits(weight=3, max_concurrency=2, rate_limit=2.0, rate_burst=2)
    idle = client.put_group(queue, "idle", max_concurrency=5)
    assert idle.effective.max_concurrency == 5 and idle.pending == 0

    first = client.list_groups(queue, limit=2)
    assert [x.group for x in first.groups] == ["acme", "beta"] and first.next_cursor
    second = client.list_groups(queue, limit=2, cursor=first.next_cursor)
    assert [x.group for x in second.groups] == ["idle"] and second.next_cursor is None
    assert [x.group for x in client.iter_groups(queue, limit=1)] == ["acme", "beta", "idle"]
    assert [x.group for x in client.list_groups(queue, active=True).groups] == ["acme", "beta"]
    assert [t.group for t in client.list_tasks(queue, group="beta").tasks] == ["beta"]

    client.delete_group(queue, "acme")
    back = client.get_group(queue, "acme")
    assert back.weight is None and back.effective.weight == 1
    client.delete_group(queue, "idle")
    with pytest.raises(taskforge.GroupNotFound) as e:
        client.get_group(queue, "idle")
    assert isinstance(e.value, taskforge.NotFound) and e.value.code == "group_not_found" and e.value.status == 404
    with pytest.raises(taskforge.InvalidRequest):
        client.put_group(queue, "bad name")
    with pytest.raises(taskforge.InvalidRequest):
        client.put_group(queue, "acme", weight=0)
    with pytest.raises(taskforge.QueueNotFound):
        client.get_group(queue + "-none", "acme")
    with pytest.raises(taskforge.InvalidRequest):
        client.update_queue(queue, fairness="weighted")
