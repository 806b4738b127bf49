<?php

return [
    'defaults' => ['guard' => 'keyhole'],
    'guards' => [
        'keyhole' => ['driver' => 'keyhole'],
    ],
];
