<?php

return [
    'socket' => env('KEYHOLE_SOCKET'),           // null: $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock
    'timeout' => (float)env('KEYHOLE_TIMEOUT', 5),
    'persistent' => false,
    'cookie' => 'kh_session',
    'apple_cookie' => env('KEYHOLE_APPLE_COOKIE', '__Host-kh_apple'), // keyholed's [apple] web_cookie: /auth/apple checks it
];
