
bench


userv1

user1v1

user2v1

user3v1

user4v1