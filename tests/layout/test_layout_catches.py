#!/usr/bin/env python3
"""The layout check must fail on a broken house: on a copy of the tree, each kind of break is
made once (an include up, one sideways, a private header of another room, a link up, netlib
reaching into the gateway, proto including a library above it, loadgen including a gateway
header), and check_layout.py must name
every one of them and exit 1. It must also pass on the copy before the breaks."""
import os
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
check = os.path.join(here, 'check_layout.py')


def run(tree):
    p = subprocess.run([sys.executable, check, '--root', tree], capture_output=True, text=True)
    return p.returncode, p.stdout


def prepend(path, line):
    text = open(path).read()
    open(path, 'w').write(line + '\n' + text)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for d in ('gateway', 'netlib', 'proto'):
            shutil.copytree(os.path.join(root, d), os.path.join(tmp, d),
                            ignore=shutil.ignore_patterns('build'))
        os.makedirs(os.path.join(tmp, 'loadgen'))
        open(os.path.join(tmp, 'loadgen', 'lg_x.c'), 'w').write('#include "proto_frame.h"\n')
        rc, out = run(tmp)
        if rc != 0:
            print('the unbroken copy fails:\n' + out)
            return 1
        g = os.path.join(tmp, 'gateway')
        prepend(os.path.join(g, 'fanout', 'gw_sub.c'), '#include "gw_core.h"')
        prepend(os.path.join(g, 'engine', 'memory', 'gw_engine_memory.c'),
                '#include "gw_engine_redis.h"')
        prepend(os.path.join(g, 'core', 'gw_loop.c'), '#include "gw_redis_link.h"')
        with open(os.path.join(g, 'state', 'CMakeLists.txt'), 'a') as f:
            f.write('gw_room(gw_state LINKS gw_engine)\n')
        prepend(os.path.join(tmp, 'netlib', 'src', 'nl_buf.c'), '#include "gw_fanout.h"')
        prepend(os.path.join(tmp, 'proto', 'proto_ws.c'), '#include <openssl/ssl.h>')
        prepend(os.path.join(tmp, 'loadgen', 'lg_x.c'), '#include "gw_auth.h"')
        rc, out = run(tmp)
        wanted = [
            'gateway/fanout/gw_sub.c: includes gw_core.h, up from fanout to core',
            'gateway/engine/memory/gw_engine_memory.c: includes gw_engine_redis.h sideways',
            'gateway/core/gw_loop.c: includes gw_redis_link.h, a private header of engine/redis',
            'gateway/state/CMakeLists.txt: links gw_engine, up from state',
            'netlib/src/nl_buf.c: netlib includes gw_fanout.h',
            'proto/proto_ws.c: proto includes openssl/ssl.h',
            'loadgen/lg_x.c: loadgen includes gw_auth.h',
        ]
        missed = [w for w in wanted if w not in out]
        if rc != 1 or missed:
            print('exit %d; not reported: %s\n%s' % (rc, missed, out))
            return 1
        print('layout check caught all %d breaks' % len(wanted))
        return 0


if __name__ == '__main__':
    sys.exit(main())
