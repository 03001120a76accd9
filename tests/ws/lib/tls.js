// A test PKI made with the openssl command in a temp dir (a CA, server certificates it signs,
// a second CA nobody trusts), and `openssl s_client` runs: TLS as a tool that is not Node's
// sees it.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const OPENSSL = process.env.OPENSSL_BIN || 'openssl';

function openssl(args) {
    return execFileSync(OPENSSL, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/**
 * A CA in a fresh temp dir: {dir, ca (its PEM path), issue(name, serial), other, cleanup()}.
 * issue writes <name>.pem and <name>.key, a P-256 certificate for localhost and 127.0.0.1
 * with the given serial (hex) and subject CN=<name>. other is a second CA's PEM path.
 */
export function makePki() {
    const dir = mkdtempSync(join(tmpdir(), 'herald-tls-'));
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
    const ca = join(dir, 'ca.pem');
    const caKey = join(dir, 'ca.key');
    openssl([
        'req',
        '-x509',
        ...ec,
        '-keyout',
        caKey,
        '-out',
        ca,
        '-days',
        '2',
        '-subj',
        '/CN=herald test CA',
    ]);
    const other = join(dir, 'other-ca.pem');
    openssl([
        'req',
        '-x509',
        ...ec,
        '-keyout',
        join(dir, 'other-ca.key'),
        '-out',
        other,
        '-days',
        '2',
        '-subj',
        '/CN=untrusted CA',
    ]);
    const ext = join(dir, 'ext.cnf');
    writeFileSync(ext, 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
    return {
        dir,
        ca,
        other,
        issue(name, serial) {
            const key = join(dir, `${name}.key`);
            const csr = join(dir, `${name}.csr`);
            const pem = join(dir, `${name}.pem`);
            openssl(['req', ...ec, '-keyout', key, '-out', csr, '-subj', `/CN=${name}`]);
            openssl([
                'x509',
                '-req',
                '-in',
                csr,
                '-CA',
                ca,
                '-CAkey',
                caKey,
                '-set_serial',
                `0x${serial}`,
                '-days',
                '2',
                '-extfile',
                ext,
                '-out',
                pem,
            ]);
            return { cert: pem, key };
        },
        cleanup() {
            rmSync(dir, { recursive: true, force: true });
        },
    };
}

/** Replaces path's content the way a rotation does: a new file renamed over the old one. */
export function replaceFile(path, content) {
    writeFileSync(`${path}.new`, content);
    renameSync(`${path}.new`, path);
}

export { readFileSync };

/**
 * Runs `openssl s_client -connect 127.0.0.1:port` with args; input is written to its stdin
 * after the handshake (a function of the child, or text), then stdin is closed. Resolves
 * with {code, out} (stdout and stderr together) when it exits; killed after timeoutMs.
 */
export function sClient(port, args = [], { input = '', timeoutMs = 10000 } = {}) {
    return new Promise((resolve) => {
        const child = spawn(OPENSSL, ['s_client', '-connect', `127.0.0.1:${port}`, ...args], {
            stdio: ['pipe', 'pipe', 'pipe'],
        });
        let out = '';
        let isFed = false;
        const feed = () => {
            if (isFed) return;
            isFed = true;
            if (typeof input === 'function') input(child);
            else child.stdin.end(input);
        };
        const onData = (d) => {
            out += d;
            // The handshake is done once s_client prints the session (or, with -brief, the
            // protocol line); a failed one ends the process by itself.
            if (
                /^(---\r?\nPost-Handshake|SSL-Session:|Protocol version:|Verify return code)/m.test(
                    out,
                )
            )
                feed();
        };
        child.stdout.setEncoding('utf8');
        child.stderr.setEncoding('utf8');
        child.stdout.on('data', onData);
        child.stderr.on('data', onData);
        child.stdin.on('error', () => {}); // s_client may be gone before its input
        const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
        child.on('close', (code, signal) => {
            clearTimeout(timer);
            resolve({ code, signal, out });
        });
    });
}

/** The serial and subject of the certificate an s_client run printed (with -showcerts off). */
export function peerCert(out) {
    const pem = out.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/);
    if (!pem) return null;
    const text = execFileSync(OPENSSL, ['x509', '-noout', '-serial', '-subject'], {
        input: pem[0],
        encoding: 'utf8',
    });
    return {
        serial: text.match(/serial=([0-9A-F]+)/)[1],
        subject: text.match(/subject=(.*)/)[1].trim(),
    };
}
