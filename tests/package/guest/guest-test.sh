#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs inside tests/package's guest, under systemd as PID 1: install the
# package, use its service, upgrade it, purge it, and check that nothing is
# left. Each check prints "ok: ..." or "FAIL: ..."; the last line, printed
# by the unit, is "GUEST-RESULT rc=N". Arguments: the .deb, and the same
# package with a higher version (the upgrade).
deb=$1
deb_up=$2
rc=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; rc=1; }
check() {	# check WHAT COMMAND...
	what=$1
	shift
	if "$@"; then ok "$what"; else fail "$what"; fi
}
main_pid() { systemctl show -p MainPID --value shuntd.service; }
wait_active() {	# until shuntd.service is active with a main pid other than $1
	i=0
	while [ $i -lt 100 ]; do
		if [ "$(systemctl is-active shuntd.service)" = active ] &&
		   [ "$(main_pid)" != 0 ] && [ "$(main_pid)" != "$1" ]; then
			return 0
		fi
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export DEBIAN_FRONTEND=noninteractive
echo "guest: $(uname -r), systemd $(systemctl --version | head -1), uptime $(cut -d' ' -f1 /proc/uptime) s"
[ "$(readlink /proc/1/exe)" = /usr/lib/systemd/systemd ] || [ "$(readlink /proc/1/exe)" = /lib/systemd/systemd ] ||
	fail "PID 1 is $(readlink /proc/1/exe), not systemd"

# -- install
if ! dpkg -i "$deb"; then
	fail "dpkg -i $deb"
	exit 1
fi
ok "dpkg -i $deb"
check "shuntd.socket enabled and listening" sh -c \
	'systemctl is-enabled shuntd.socket && systemctl is-active shuntd.socket && test -S /run/shunt/shuntd.sock'
check "shuntd.service enabled" systemctl is-enabled shuntd.service
check "systemd-analyze verify the installed units" systemd-analyze verify \
	/lib/systemd/system/shuntd.socket /lib/systemd/system/shuntd.service
check "shuntd.service active (Type=notify: READY=1 arrived)" wait_active 0
pid=$(main_pid)
echo "shuntd main pid $pid: $(tr '\0' ' ' < /proc/$pid/cmdline)"
bnd=$(sed -n 's/^CapBnd:\t//p' /proc/$pid/status)
# CAP_DAC_READ_SEARCH 2, CAP_NET_ADMIN 12, CAP_SYS_PTRACE 19, CAP_SYS_ADMIN 21, CAP_SYS_RESOURCE 24
check "the daemon's capability bounding set is exactly what it needs ($bnd)" \
	test "$bnd" = 0000000001281004
# Socket activation: the listening socket is one, held by systemd and shuntd.
check "the daemon serves the very socket systemd listens on" sh -c \
	"ss -xlp src /run/shunt/shuntd.sock | grep -q '\"systemd\",pid=1' &&
	 ss -xlp src /run/shunt/shuntd.sock | grep -q '\"shuntd\",pid=$pid'"
check "the man pages are installed" sh -c 'man -w shunt && man -w shuntd && man -w shunt.conf && man -w libshunt' >/dev/null

# -- a program pair under shunt run, on the service's daemon
work=$(mktemp -d)
cd "$work" || exit 1
SHUNT_STATS=$work/server.stats shunt run -- redis-server --port 7601 --save '' --appendonly no > server.log 2>&1 &
srv=$!
i=0
until redis-cli -p 7601 ping >/dev/null 2>&1 || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
SHUNT_STATS=$work/client.stats shunt run -- redis-benchmark -p 7601 -n 2000 -c 2 -t set,get -q > bench.out 2>&1
check "redis-benchmark under shunt run exits 0" test $? = 0
cat bench.out | tr '\r' '\n' | grep 'per second' | tail -2
shunt status > status.out 2>&1
# A connection held open: on shared memory, with its companion kernel
# sockets (TCP_REPAIR: the daemon's CAP_NET_ADMIN), which ss lists.
shunt run -- python3 -c "import socket, time; s = socket.create_connection(('127.0.0.1', 7601)); time.sleep(30)" &
hold=$!
port=""
i=0
while [ -z "$port" ] && [ $i -lt 100 ]; do
	port=$(shunt status --json --transport shm | grep -o '"client": *"127.0.0.1:[0-9]*"' |
	       head -1 | sed 's/.*:\([0-9]*\)"$/\1/')
	[ -n "$port" ] || sleep 0.1
	i=$((i + 1))
done
check "a connection held open is listed on shared memory (client port $port)" test -n "$port"
check "it has its companion kernel sockets (CAP_NET_ADMIN suffices)" sh -c \
	"ss -Htn state established '( sport = :$port )' | grep -q ':7601'"
kill $hold
wait $hold 2>/dev/null
kill $srv; wait $srv
shm=$(grep -o '"shm_connect":[0-9]*' client.stats | cut -d: -f2 | awk '{s+=$1} END {print s+0}')
bytes=$(grep -o '"shm_tx_bytes":[0-9]*' client.stats | cut -d: -f2 | awk '{s+=$1} END {print s+0}')
check "the client's connections used shared memory ($shm connections, $bytes bytes sent)" \
	test "$shm" -gt 0 -a "$bytes" -gt 0
check "shunt status talks to the service's daemon" grep -qi 'tenant\|process' status.out
check "the only shuntd is the service's (shunt run started none)" \
	test "$(pgrep -x shuntd)" = "$(main_pid)"

# -- reload (SIGHUP) and restart on failure
check "systemctl reload shuntd keeps the same daemon" sh -c \
	"systemctl reload shuntd.service && test \"\$(systemctl show -p MainPID --value shuntd.service)\" = $pid"
kill -9 "$pid"
check "killed by SIGKILL, shuntd.service is restarted (Restart=on-failure)" wait_active "$pid"
check "the restarted daemon serves the same socket" sh -c \
	'shunt status >/dev/null && test -S /run/shunt/shuntd.sock'

# -- the daemon stopped, the socket still listening: a client starts it
systemctl stop shuntd.service
check "with shuntd.service stopped, shuntd.socket still listens" sh -c \
	'test "$(systemctl is-active shuntd.service)" != active && systemctl is-active shuntd.socket'
check "a client's connection starts shuntd.service (socket activation)" sh -c \
	"shunt status >/dev/null && systemctl is-active shuntd.service"

# -- upgrade
pid=$(main_pid)
check "dpkg -i the next version (upgrade)" dpkg -i "$deb_up"
check "after the upgrade: $(dpkg-query -W -f='${Version}' shunt), service restarted" wait_active "$pid"
check "after the upgrade the socket is still served" systemctl is-active shuntd.socket

# -- purge, and nothing left behind
files=$(dpkg -L shunt | while read -r f; do [ -d "$f" ] || echo "$f"; done)
check "dpkg --purge shunt" dpkg --purge shunt
left=""
for f in $files; do [ -e "$f" ] || [ -L "$f" ] && left="$left $f"; done
check "no file of the package is left:$left" test -z "$left"
check "no directory of the package's own is left" sh -c \
	'! test -e /etc/shunt && ! test -e /usr/lib/x86_64-linux-gnu/shunt && ! test -e /usr/share/shunt && ! test -e /usr/share/doc/shunt'
check "nothing left in /run/shunt" test ! -e /run/shunt
check "no shuntd process is left" sh -c '! pgrep -x shuntd'
check "no unit or enablement link is left" sh -c \
	'test -z "$(find /etc/systemd /lib/systemd/system /run/systemd/system /var/lib/systemd/deb-systemd-helper-enabled -name "shuntd*" 2>/dev/null)"'
check "systemd no longer knows the units" sh -c \
	'systemctl daemon-reload; ! systemctl list-unit-files shuntd.service shuntd.socket | grep -q shuntd'
check "dpkg no longer knows the package" sh -c '! dpkg -s shunt >/dev/null 2>&1'
exit $rc
