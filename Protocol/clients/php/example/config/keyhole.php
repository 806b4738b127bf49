<?php

return [
    'socket' => env('KEYHOLE_SOCKET'),           // null: $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock
    'timeout' => (float)env('KEYHOLE_TIMEOUT', 5),
    'persistent' => false,
    'cookie' => 'kh_session',
];
