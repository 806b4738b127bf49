<?php

return [
    'name' => 'Keyhole example',
    'env' => 'production',
    'debug' => false,
    'timezone' => 'UTC',
    'providers' => [
        Illuminate\Auth\AuthServiceProvider::class,
        Keyhole\Laravel\KeyholeServiceProvider::class,
        App\ExampleServiceProvider::class,
    ],
    'aliases' => [
        'Auth' => Illuminate\Support\Facades\Auth::class,
    ],
];
