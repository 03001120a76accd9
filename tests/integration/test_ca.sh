# test_ca.sh: a throwaway certificate authority for the TLS tests (test_loadgen_transport.sh,
# the browser test). Source it, then: make_test_ca DIR. With openssl(1), P-256 keys (fast
# handshakes), valid for two days, in DIR:
#   ca.pem, ca.key          the test CA (basicConstraints CA:TRUE, keyCertSign)
#   server.pem, server.key  herald's certificate, signed by the CA, for localhost and 127.0.0.1
#                           (subjectAltName DNS and IP, serverAuth: what browsers require)
#   rogue.pem, rogue.key    another CA, which signed nothing herald serves: a client that
#                           trusts only it must refuse herald's certificate
make_test_ca() { # dir
    local dir=$1
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    mkdir -p "$dir"
    openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 \
        -subj "/CN=herald test CA" -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null || return 1
    openssl req -x509 "${ec[@]}" -keyout "$dir/rogue.key" -out "$dir/rogue.pem" -days 2 \
        -subj "/CN=herald rogue CA" -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null || return 1
    openssl req "${ec[@]}" -keyout "$dir/server.key" -out "$dir/server.csr" \
        -subj "/CN=localhost" 2>/dev/null || return 1
    printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$dir/server.ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -out "$dir/server.pem" -days 2 -extfile "$dir/server.ext" \
        2>/dev/null || return 1
}
