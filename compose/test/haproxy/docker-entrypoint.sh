#!/bin/sh
# The official haproxy image's entrypoint, for the stand-in image: flags alone run
# haproxy; haproxy runs in master-worker mode in the foreground.
set -e
if [ "${1#-}" != "$1" ]; then
	set -- haproxy "$@"
fi
if [ "$1" = haproxy ]; then
	shift
	set -- haproxy -W -db "$@"
fi
exec "$@"
