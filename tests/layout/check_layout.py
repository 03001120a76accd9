#!/usr/bin/env python3
"""Keeps the house standing: every #include and every target link in gateway/ runs down the
rooms' order, never up or sideways; netlib includes nothing above it; proto only netlib,
protobuf-c and libwslay (its WebSocket frame reader, shared by the server and loadgen); loadgen speaks only the wire protocol (no gateway header, no gateway target).

Usage: check_layout.py [--root DIR]   (default: the checkout this file is in)
Prints one line per violation and exits 1 if there is any, 0 otherwise.

The order, bottom first (gateway/CMakeLists.txt says what each room holds). Rooms on one rank
know nothing of each other.
"""
import argparse
import os
import re
import sys

RANKS = [
    ['channel', 'metrics', 'transport'],
    ['auth'],
    ['fanout'],
    ['config'],
    ['state'],
    ['engine'],
    ['engine/memory', 'engine/redis'],
    ['core'],
    ['admin'],
]
RANK = {room: i for i, rooms in enumerate(RANKS) for room in rooms}
MAIN_RANK = len(RANKS)  # gateway/main.c wires every room

# Third-party headers netlib must never include (it depends on libc, and liburing).
NOT_IN_NETLIB = re.compile(r'^(hiredis|openssl|protobuf-c|wslay|microhttpd|jansson|ini|cmocka)'
                           r'|(gw_|lg_|proto_|herald\.pb-c)')
# Third-party headers proto must never include (it depends on netlib, protobuf-c and libwslay).
NOT_IN_PROTO = re.compile(r'^(hiredis|openssl|microhttpd|jansson|ini|cmocka|http_parser)')
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def sources(top):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d != 'build']
        for fn in filenames:
            if fn.endswith(('.c', '.h')):
                yield os.path.join(dirpath, fn)


def room_of(gateway, path):
    """The room a file under gateway/ belongs to (its longest matching room folder)."""
    rel = os.path.relpath(path, gateway)
    best = None
    for room in RANK:
        if rel.startswith(room + '/') and (best is None or len(room) > len(best)):
            best = room
    return best


def rooms_headers(gateway):
    """header name -> (room, is_public) for every header in a room."""
    out = {}
    for room in RANK:
        d = os.path.join(gateway, room)
        if not os.path.isdir(d):
            continue
        for fn in os.listdir(d):
            if fn.endswith('.h'):
                out.setdefault(fn, (room, False))
        inc = os.path.join(d, 'include')
        if os.path.isdir(inc):
            for fn in os.listdir(inc):
                out[fn] = (room, True)
    return out


def check_gateway(root, say):
    gateway = os.path.join(root, 'gateway')
    headers = rooms_headers(gateway)
    for room in RANK:
        inc = os.path.join(gateway, room, 'include')
        if os.path.isdir(inc) and len([f for f in os.listdir(inc) if f.endswith('.h')]) != 1:
            say('%s: a room has exactly one public header in include/' % os.path.relpath(inc, root))
    for path in sources(gateway):
        rel = os.path.relpath(path, root)
        room = room_of(gateway, path)
        if room is None:
            if os.path.relpath(path, gateway) != 'main.c':
                say('%s: not in a room (gateway/<room>/)' % rel)
                continue
            rank = MAIN_RANK
        else:
            rank = RANK[room]
        text = open(path, encoding='utf-8', errors='replace').read()
        for kind, name in INCLUDE.findall(text):
            if kind != '"' or '/' in name or name not in headers:
                continue
            other, is_public = headers[name]
            if other == room:
                continue
            if not is_public:
                say('%s: includes %s, a private header of %s' % (rel, name, other))
            elif RANK[other] == rank:
                say('%s: includes %s sideways (%s and %s share a rank)' % (rel, name, room, other))
            elif RANK[other] > rank:
                say('%s: includes %s, up from %s to %s' % (rel, name, room or 'main.c', other))


def check_links(root, say):
    gateway = os.path.join(root, 'gateway')
    targets = {'gw_' + room.replace('engine/', 'engine_'): room for room in RANK}
    for room in RANK:
        cm = os.path.join(gateway, room, 'CMakeLists.txt')
        if not os.path.exists(cm):
            continue
        text = open(cm).read()
        rel = os.path.relpath(cm, root)
        blocks = re.findall(r'\b(gw_room|target_link_libraries)\((.*?)\)', text, re.S)
        if not any(kind == 'gw_room' for kind, _ in blocks):
            say('%s: no gw_room(...)' % rel)
        for kind, body in blocks:
            names = re.findall(r'\bgw_[a-z_]+', body)
            if kind == 'gw_room' and names and targets.get(names[0]) != room:
                say("%s: the room's target is %s" % (rel, names[0]))
            for lib in names[1:] if kind == 'gw_room' else names:
                other = targets.get(lib)
                if other is None:
                    say('%s: links %s, which is no room' % (rel, lib))
                elif RANK[other] >= RANK[room]:
                    say('%s: links %s, %s from %s' %
                        (rel, lib, 'sideways' if RANK[other] == RANK[room] else 'up', room))


def check_lower_libraries(root, say):
    for path in sources(os.path.join(root, 'netlib')):
        for kind, name in INCLUDE.findall(open(path).read()):
            if kind == '"' and not (name.startswith('netlib/') or '/' not in name and
                                    name.startswith('nl_')):
                say('%s: netlib includes %s' % (os.path.relpath(path, root), name))
            elif NOT_IN_NETLIB.search(name):
                say('%s: netlib includes %s' % (os.path.relpath(path, root), name))
    for path in sources(os.path.join(root, 'proto')):
        for kind, name in INCLUDE.findall(open(path).read()):
            if kind == '"' and not (name.startswith('netlib/') or name.startswith('proto_') or
                                    name.startswith('herald.pb-c')):
                say('%s: proto includes %s' % (os.path.relpath(path, root), name))
            elif kind == '<' and NOT_IN_PROTO.search(name):
                say('%s: proto includes %s' % (os.path.relpath(path, root), name))
    loadgen = os.path.join(root, 'loadgen')
    for path in sources(loadgen):
        for kind, name in INCLUDE.findall(open(path).read()):
            if name.startswith('gw_') or name.startswith('gateway/'):
                say('%s: loadgen includes %s (it speaks only the wire protocol)' %
                    (os.path.relpath(path, root), name))
    cm = os.path.join(loadgen, 'CMakeLists.txt')
    if os.path.exists(cm):
        for block in re.findall(r'target_link_libraries\((.*?)\)', open(cm).read(), re.S):
            for lib in re.findall(r'\b(gw_[a-z_]+|gateway_core)\b', block):
                say('loadgen/CMakeLists.txt: links %s (it speaks only the wire protocol)' % lib)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    args = ap.parse_args()
    problems = []
    check_gateway(args.root, problems.append)
    check_links(args.root, problems.append)
    check_lower_libraries(args.root, problems.append)
    for p in problems:
        print('layout: ' + p)
    if problems:
        print('layout: %d problem(s); the rooms\' order is in gateway/CMakeLists.txt' %
              len(problems))
        return 1
    print('layout: ok (%d rooms)' % len(RANK))
    return 0


if __name__ == '__main__':
    sys.exit(main())
