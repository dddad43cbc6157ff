from django.urls import path

from kb import views

app_name = "kb"
urlpatterns = [
    path("", views.ask, name="ask"),
    path("api/ask", views.api_ask, name="api-ask"),
    path("api/feedback", views.api_feedback, name="api-feedback"),
    path("kb/questions/<int:pk>/", views.question, name="question"),
    path("kb/questions/<int:pk>/feedback/", views.feedback, name="feedback"),
    path("kb/sections/<int:pk>/", views.section, name="section"),
    path("kb/sources/<int:pk>/file/", views.source_file, name="source-file"),
]
