#!/bin/bash
# The official redis image's contract, for the stand-in image: flags alone run
# redis-server; as root, own /data and re-run as redis; protected mode off unless
# asked for (the container's network is the boundary).
set -euo pipefail
if [[ ${1:0:1} == - ]]; then
	set -- redis-server "$@"
fi
if [[ $1 == redis-server && $(id -u) == 0 ]]; then
	find . \! -user redis -exec chown redis '{}' +
	exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
fi
if [[ $1 == redis-server && " $* " != *" --protected-mode "* ]]; then
	set -- "$@" --protected-mode no
fi
umask 0077
exec "$@"
