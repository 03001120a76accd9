// Generated from proto/herald.proto by scripts/gen-schema.js: do not edit.
// test/schema.test.js checks that it matches the .proto.
export default {
  "nested": {
    "herald": {
      "options": {
        "java_package": "io.herald.proto",
        "java_multiple_files": true,
        "go_package": "herald/proto;heraldpb"
      },
      "nested": {
        "Frame": {
          "oneofs": {
            "body": {
              "oneof": [
                "connect",
                "connectOk",
                "subscribe",
                "subscribeOk",
                "unsubscribe",
                "unsubscribeOk",
                "publish",
                "publishOk",
                "push",
                "ping",
                "pong",
                "presenceRequest",
                "presenceResponse",
                "error",
                "disconnect",
                "presenceEvent"
              ]
            }
          },
          "fields": {
            "id": {
              "type": "uint64",
              "id": 1
            },
            "connect": {
              "type": "Connect",
              "id": 2
            },
            "connectOk": {
              "type": "ConnectOk",
              "id": 3,
              "protoName": "connect_ok"
            },
            "subscribe": {
              "type": "Subscribe",
              "id": 4
            },
            "subscribeOk": {
              "type": "SubscribeOk",
              "id": 5,
              "protoName": "subscribe_ok"
            },
            "unsubscribe": {
              "type": "Unsubscribe",
              "id": 6
            },
            "unsubscribeOk": {
              "type": "UnsubscribeOk",
              "id": 7,
              "protoName": "unsubscribe_ok"
            },
            "publish": {
              "type": "Publish",
              "id": 8
            },
            "publishOk": {
              "type": "PublishOk",
              "id": 9,
              "protoName": "publish_ok"
            },
            "push": {
              "type": "Push",
              "id": 10
            },
            "ping": {
              "type": "Ping",
              "id": 11
            },
            "pong": {
              "type": "Pong",
              "id": 12
            },
            "presenceRequest": {
              "type": "PresenceRequest",
              "id": 13,
              "protoName": "presence_request"
            },
            "presenceResponse": {
              "type": "PresenceResponse",
              "id": 14,
              "protoName": "presence_response"
            },
            "error": {
              "type": "Error",
              "id": 15
            },
            "disconnect": {
              "type": "Disconnect",
              "id": 16
            },
            "presenceEvent": {
              "type": "PresenceEvent",
              "id": 17,
              "protoName": "presence_event"
            }
          }
        },
        "Connect": {
          "fields": {
            "token": {
              "type": "string",
              "id": 1
            },
            "clientName": {
              "type": "string",
              "id": 2,
              "protoName": "client_name"
            },
            "clientVersion": {
              "type": "string",
              "id": 3,
              "protoName": "client_version"
            }
          }
        },
        "ConnectOk": {
          "fields": {
            "clientId": {
              "type": "string",
              "id": 1,
              "protoName": "client_id"
            },
            "nodeId": {
              "type": "string",
              "id": 2,
              "protoName": "node_id"
            },
            "pingIntervalMs": {
              "type": "uint32",
              "id": 3,
              "protoName": "ping_interval_ms"
            },
            "idleTimeoutMs": {
              "type": "uint32",
              "id": 4,
              "protoName": "idle_timeout_ms"
            },
            "userId": {
              "type": "string",
              "id": 5,
              "protoName": "user_id"
            },
            "maxFrameBytes": {
              "type": "uint32",
              "id": 6,
              "protoName": "max_frame_bytes"
            }
          }
        },
        "Subscribe": {
          "fields": {
            "channel": {
              "type": "string",
              "id": 1
            },
            "recover": {
              "type": "bool",
              "id": 2
            },
            "offset": {
              "type": "uint64",
              "id": 3
            },
            "epoch": {
              "type": "string",
              "id": 4
            },
            "joinLeave": {
              "type": "bool",
              "id": 5,
              "protoName": "join_leave"
            }
          }
        },
        "SubscribeOk": {
          "fields": {
            "recovered": {
              "type": "bool",
              "id": 1
            },
            "publications": {
              "rule": "repeated",
              "type": "Push",
              "id": 2
            },
            "offset": {
              "type": "uint64",
              "id": 3
            },
            "epoch": {
              "type": "string",
              "id": 4
            },
            "recoverable": {
              "type": "bool",
              "id": 5
            }
          }
        },
        "Unsubscribe": {
          "fields": {
            "channel": {
              "type": "string",
              "id": 1
            }
          }
        },
        "UnsubscribeOk": {
          "fields": {}
        },
        "Publish": {
          "fields": {
            "channel": {
              "type": "string",
              "id": 1
            },
            "payload": {
              "type": "bytes",
              "id": 2
            },
            "idempotencyKey": {
              "type": "string",
              "id": 3,
              "protoName": "idempotency_key"
            }
          }
        },
        "PublishOk": {
          "fields": {
            "offset": {
              "type": "uint64",
              "id": 1
            },
            "epoch": {
              "type": "string",
              "id": 2
            },
            "duplicate": {
              "type": "bool",
              "id": 3
            }
          }
        },
        "Push": {
          "fields": {
            "channel": {
              "type": "string",
              "id": 1
            },
            "offset": {
              "type": "uint64",
              "id": 2
            },
            "epoch": {
              "type": "string",
              "id": 3
            },
            "payload": {
              "type": "bytes",
              "id": 4
            },
            "publishTimeMs": {
              "type": "uint64",
              "id": 5,
              "protoName": "publish_time_ms"
            }
          }
        },
        "Ping": {
          "fields": {}
        },
        "Pong": {
          "fields": {}
        },
        "PresenceRequest": {
          "fields": {
            "channel": {
              "type": "string",
              "id": 1
            }
          }
        },
        "ClientInfo": {
          "fields": {
            "userId": {
              "type": "string",
              "id": 1,
              "protoName": "user_id"
            },
            "clientId": {
              "type": "string",
              "id": 2,
              "protoName": "client_id"
            },
            "connectedAtMs": {
              "type": "uint64",
              "id": 3,
              "protoName": "connected_at_ms"
            }
          }
        },
        "PresenceResponse": {
          "fields": {
            "channel": {
              "type": "string",
              "id": 1
            },
            "clients": {
              "rule": "repeated",
              "type": "ClientInfo",
              "id": 2
            },
            "numClients": {
              "type": "uint32",
              "id": 3,
              "protoName": "num_clients"
            },
            "numUsers": {
              "type": "uint32",
              "id": 4,
              "protoName": "num_users"
            },
            "truncated": {
              "type": "bool",
              "id": 5
            }
          }
        },
        "PresenceEvent": {
          "fields": {
            "channel": {
              "type": "string",
              "id": 1
            },
            "joined": {
              "rule": "repeated",
              "type": "ClientInfo",
              "id": 2
            },
            "left": {
              "rule": "repeated",
              "type": "ClientInfo",
              "id": 3
            }
          }
        },
        "Error": {
          "fields": {
            "code": {
              "type": "Code",
              "id": 1
            },
            "text": {
              "type": "string",
              "id": 2
            },
            "retryAfterMs": {
              "type": "uint32",
              "id": 3,
              "protoName": "retry_after_ms"
            }
          },
          "nested": {
            "Code": {
              "values": {
                "UNSPECIFIED": 0,
                "BAD_REQUEST": 1,
                "UNAUTHORIZED": 2,
                "TOKEN_EXPIRED": 3,
                "FORBIDDEN": 4,
                "BUSY": 5,
                "RATE_LIMITED": 6,
                "FRAME_TOO_LARGE": 7,
                "TOO_MANY_SUBSCRIPTIONS": 8,
                "BAD_CHANNEL": 9,
                "NOT_SUBSCRIBED": 10,
                "INTERNAL": 11,
                "ALREADY_SUBSCRIBED": 12,
                "NOT_SUPPORTED": 13,
                "CANCELLED": 14,
                "OUTCOME_UNKNOWN": 15
              }
            }
          }
        },
        "Disconnect": {
          "fields": {
            "code": {
              "type": "Code",
              "id": 1
            },
            "reason": {
              "type": "string",
              "id": 2
            },
            "reconnect": {
              "type": "bool",
              "id": 3
            },
            "reconnectDelayMs": {
              "type": "uint32",
              "id": 4,
              "protoName": "reconnect_delay_ms"
            }
          },
          "nested": {
            "Code": {
              "values": {
                "UNSPECIFIED": 0,
                "NORMAL": 1,
                "IDLE_TIMEOUT": 2,
                "SLOW_CONSUMER": 3,
                "SERVER_FULL": 4,
                "SHUTDOWN": 5,
                "AUTH_FAILED": 6,
                "PROTOCOL_ERROR": 7,
                "FRAME_TOO_LARGE": 8,
                "TOKEN_EXPIRED": 9
              }
            }
          }
        }
      }
    }
  }
};
